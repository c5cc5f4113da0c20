"""Worker methods, registered into a :class:`~posttrain_worker.server.registry.MethodRegistry`."""

from posttrain_worker.methods.basic import register_basic_methods
from posttrain_worker.methods.chat import register_chat_methods
from posttrain_worker.methods.control import register_control_methods
from posttrain_worker.methods.generation import register_generation_methods
from posttrain_worker.methods.models import register_model_methods
from posttrain_worker.methods.training import register_training_methods
from posttrain_worker.methods.weights import register_weight_methods
from posttrain_worker.models.store import ModelStore
from posttrain_worker.server.registry import MethodRegistry


def default_registry() -> MethodRegistry:
    """Every method this worker version serves."""
    registry = MethodRegistry()
    register_basic_methods(registry)
    store = ModelStore()
    register_model_methods(registry, store)
    register_generation_methods(registry, store)
    register_chat_methods(registry, store)
    register_training_methods(registry, store)
    register_weight_methods(registry, store)
    register_control_methods(registry)
    return registry


__all__ = [
    "default_registry",
    "register_basic_methods",
    "register_chat_methods",
    "register_control_methods",
    "register_generation_methods",
    "register_model_methods",
    "register_training_methods",
    "register_weight_methods",
]
