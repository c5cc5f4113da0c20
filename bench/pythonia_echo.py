"""Functions the bridge benchmark calls through pythonia (its per-call and 1 MB baselines)."""


def noop() -> int:
    return 0


def echo(data):  # type: ignore[no-untyped-def]
    return data
