"""The Python sandbox driver that the TypeScript ``PythonSandbox`` runs in a child process.

The driver is started by file path (``python -I -u driver.py CONFIG``), never imported by the worker: it uses
the standard library only, so the sandbox does not need ``posttrain_worker`` (or torch) to run.
"""
