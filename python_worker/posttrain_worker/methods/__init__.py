"""Worker methods, registered into a :class:`~posttrain_worker.server.registry.MethodRegistry`."""

from posttrain_worker.methods.basic import register_basic_methods
from posttrain_worker.methods.models import register_model_methods
from posttrain_worker.models.store import ModelStore
from posttrain_worker.server.registry import MethodRegistry


def default_registry() -> MethodRegistry:
    """Every method this worker version serves."""
    registry = MethodRegistry()
    register_basic_methods(registry)
    register_model_methods(registry, ModelStore())
    return registry


__all__ = ["default_registry", "register_basic_methods", "register_model_methods"]
