"""Trainer methods: trainer_create, train_step, compute_loss, trainer_state, trainer_close, save_checkpoint,
load_checkpoint (docs/training.md).

A trainer is bound to one model of the store, by the model's name; it lives until ``trainer_close`` or until
its model is unloaded or replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posttrain_worker.methods.payload_keys import single_batch
from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import ArgReader
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodRegistry
from posttrain_worker.training.batch import TrainBatch, read_train_batch
from posttrain_worker.training.checkpoint import load_checkpoint, save_checkpoint
from posttrain_worker.training.errors import TRAINER_EXISTS, TRAINER_NOT_FOUND
from posttrain_worker.training.fields import Reader
from posttrain_worker.training.lora import parse_lora
from posttrain_worker.training.optimizer import parse_optimizer
from posttrain_worker.training.schedule import ScheduleConfig, parse_schedule
from posttrain_worker.training.trainer import Trainer, TrainerConfig

AUTOCAST = ("bfloat16",)
DEFAULT_OPTIMIZER = {"type": "adamw", "lr": 1e-5}
DEFAULT_GRAD_CLIP = 1.0

# ---- arguments -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateArgs:
    model: str
    config: TrainerConfig
    replace: bool


@dataclass(frozen=True)
class CheckpointArgs:
    model: str
    directory: str
    data_position: Any


def model_name(reader: ArgReader, key: str = "model") -> str:
    value = reader.string(key)
    assert value is not None
    if not value:
        raise reader.fail(f'"{key}" must be a non-empty string')
    return value


def parse_create(method: str, args: dict[str, Any]) -> CreateArgs:
    from posttrain_worker.objectives.api import parse_loss_config

    reader = Reader(method, args)
    model = model_name(reader)
    loss_wire = reader.object("loss")
    assert loss_wire is not None
    loss = parse_loss_config(loss_wire)
    optimizer = parse_optimizer(method, reader.object("optimizer", required=False) or DEFAULT_OPTIMIZER)
    schedule_raw = reader.object("schedule", required=False)
    schedule = parse_schedule(method, schedule_raw) if schedule_raw is not None else ScheduleConfig()
    clip = (
        None
        if reader.null("gradClip")
        else reader.number("gradClip", required=False, default=DEFAULT_GRAD_CLIP)
    )
    micro = reader.integer("microBatchTokens", required=False, default=None, minimum=1, nullable=True)
    ref_model = None if reader.null("refModel") else reader.string("refModel", required=False)
    autocast = None if reader.null("autocast") else reader.choice("autocast", AUTOCAST, required=False)
    lora_raw = None if reader.null("lora") else reader.object("lora", required=False)
    lora = parse_lora(method, lora_raw) if lora_raw is not None else None
    replace = reader.boolean("replace", required=False, default=False)
    reader.finish()
    assert replace is not None
    if clip is not None and clip <= 0:
        raise reader.fail(f'"gradClip" must be > 0 or null, got {clip:g}')
    if ref_model == "":
        raise reader.fail('"refModel" must be a non-empty string or null')
    config = TrainerConfig(
        loss_wire=loss_wire,
        loss=loss,
        optimizer=optimizer,
        schedule=schedule,
        grad_clip=clip,
        micro_batch_tokens=micro,
        ref_model=ref_model,
        autocast=autocast,
        lora=lora,
    )
    return CreateArgs(model, config, replace)


def parse_model(method: str, args: dict[str, Any]) -> str:
    reader = ArgReader(method, args)
    model = model_name(reader)
    reader.finish()
    return model


def parse_save(method: str, args: dict[str, Any]) -> CheckpointArgs:
    reader = Reader(method, args)
    model = model_name(reader)
    directory = model_name(reader, "dir")
    data_position = reader.json("dataPosition")
    reader.finish()
    return CheckpointArgs(model, directory, data_position)


def parse_load(method: str, args: dict[str, Any]) -> CheckpointArgs:
    reader = ArgReader(method, args)
    model = model_name(reader)
    directory = model_name(reader, "dir")
    reader.finish()
    return CheckpointArgs(model, directory, None)


# ---- the trainers of this worker -----------------------------------------------------------------------


class Trainers:
    """The trainers of one worker, by model name (used from the compute thread only)."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self._trainers: dict[str, Trainer] = {}

    def create(self, method: str, args: CreateArgs) -> Trainer:
        existing = self._trainers.get(args.model)
        if existing is not None and self._alive(existing) and not args.replace:
            raise WorkerFailure(
                TRAINER_EXISTS,
                f"{method}: a trainer is already bound to {args.model!r}; pass replace to start a new one",
            )
        loaded = self.store.get(args.model)
        if loaded.model is None:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: model {args.model!r} has no torch module to train (backend "
                f"{getattr(loaded, 'backend', '?')!r}); load it with the transformers backend",
            )
        ref = self._ref(method, loaded, args.config.ref_model)
        trainer = Trainer(loaded, args.config, ref)
        self._trainers[args.model] = trainer
        return trainer

    def _ref(self, method: str, loaded: LoadedModel, name: str | None) -> LoadedModel | None:
        if name is None:
            return None
        ref = self.store.get(name)
        if ref.model is loaded.model:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f'{method}: "refModel" {name!r} is the trained model itself; load a separate copy',
            )
        return ref

    def _alive(self, trainer: Trainer) -> bool:
        """The trainer's model is still the one loaded under its name."""
        try:
            return self.store.get(trainer.loaded.name) is trainer.loaded
        except WorkerFailure:
            return False

    def get(self, method: str, model: str) -> Trainer:
        trainer = self._trainers.get(model)
        if trainer is None or not self._alive(trainer):
            self._trainers.pop(model, None)
            raise WorkerFailure(
                TRAINER_NOT_FOUND,
                f"{method}: no trainer is bound to model {model!r} (trainer_create first; a trainer ends "
                "when its model is unloaded or replaced)",
                {"trainers": list(self._trainers)},
            )
        return trainer

    def close(self, method: str, model: str) -> None:
        self.get(method, model)
        del self._trainers[model]


def _batch(ctx: CallContext, trainer: Trainer) -> TrainBatch:
    loaded = trainer.loaded
    vocab = int(loaded.model.get_input_embeddings().weight.shape[0])
    positions = getattr(loaded.model.config, "max_position_embeddings", None)
    limit = int(positions) if isinstance(positions, int) and positions > 0 else None
    return read_train_batch(
        ctx.method, single_batch(ctx), trainer.needs(), vocab_size=vocab, max_positions=limit
    )


# ---- registration --------------------------------------------------------------------------------------


def register_training_methods(registry: MethodRegistry, store: ModelStore) -> Trainers:
    trainers = Trainers(store)

    def trainer_create(ctx: CallContext, args: CreateArgs) -> dict[str, Any]:
        trainer = trainers.create(ctx.method, args)
        needs = trainer.needs()
        return {
            **trainer.state(),
            "needs": {
                "oldLogProbs": needs.old_log_probs,
                "refLogProbs": needs.ref_log_probs,
                "advantages": needs.advantages,
            },
        }

    def train_step(ctx: CallContext, model: str) -> dict[str, Any]:
        trainer = trainers.get(ctx.method, model)
        return trainer.step(_batch(ctx, trainer), ctx.check_cancelled)

    def compute_loss(ctx: CallContext, model: str) -> dict[str, Any]:
        trainer = trainers.get(ctx.method, model)
        return trainer.compute_loss(_batch(ctx, trainer), ctx.check_cancelled)

    def trainer_state(ctx: CallContext, model: str) -> dict[str, Any]:
        return trainers.get(ctx.method, model).state()

    def trainer_close(ctx: CallContext, model: str) -> dict[str, Any]:
        trainers.close(ctx.method, model)
        return {}

    def save(ctx: CallContext, args: CheckpointArgs) -> dict[str, Any]:
        trainer = trainers.get(ctx.method, args.model)
        return save_checkpoint(ctx.method, trainer, args.directory, args.data_position)

    def load(ctx: CallContext, args: CheckpointArgs) -> dict[str, Any]:
        trainer = trainers.get(ctx.method, args.model)
        saved = load_checkpoint(ctx.method, trainer, args.directory)
        return {**trainer.state(), "dataPosition": saved.get("dataPosition"), "path": saved["path"]}

    batch = ("tensordict",)
    registry.add("trainer_create", trainer_create, thread="compute", parse_args=parse_create)
    registry.add("train_step", train_step, thread="compute", parse_args=parse_model, payloads=batch)
    registry.add("compute_loss", compute_loss, thread="compute", parse_args=parse_model, payloads=batch)
    registry.add("trainer_state", trainer_state, thread="compute", parse_args=parse_model)
    registry.add("trainer_close", trainer_close, thread="compute", parse_args=parse_model)
    registry.add("save_checkpoint", save, thread="compute", parse_args=parse_save)
    registry.add("load_checkpoint", load, thread="compute", parse_args=parse_load)
    return trainers
