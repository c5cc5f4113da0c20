"""Trainer methods: trainer_create, train_step, compute_loss, trainer_state, trainer_close, save_checkpoint,
load_checkpoint (docs/training.md).

A trainer is bound to one model of the store, by the model's name; it lives until ``trainer_close`` or until
its model is unloaded or replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posttrain_worker.methods.models import MODEL_ARG, ONLY_MODEL_ARGS
from posttrain_worker.methods.payload_keys import single_batch
from posttrain_worker.models.prompts import max_positions, vocab_size
from posttrain_worker.models.store import LoadedModel, ModelStore
from posttrain_worker.protocol.args import Arg, ArgsSchema, ParsedArgs
from posttrain_worker.protocol.errors import BAD_ARGUMENTS, WorkerFailure
from posttrain_worker.server.registry import CallContext, MethodRegistry
from posttrain_worker.training.batch import TrainBatch, read_train_batch
from posttrain_worker.training.checkpoint import load_checkpoint, save_checkpoint
from posttrain_worker.training.errors import TRAINER_EXISTS, TRAINER_NOT_FOUND
from posttrain_worker.training.lora import parse_lora
from posttrain_worker.training.optimizer import parse_optimizer
from posttrain_worker.training.parallel import agree, join_group, parse_parallel
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


def build_create(parsed: ParsedArgs) -> CreateArgs:
    """The nested ``loss``, ``optimizer``, ``schedule`` and ``lora`` objects, read by their own parsers."""
    from posttrain_worker.objectives.api import parse_loss_config

    method = parsed.method
    loss_wire = parsed["loss"]
    loss = parse_loss_config(loss_wire)
    optimizer = parse_optimizer(method, parsed["optimizer"] or DEFAULT_OPTIMIZER)
    schedule_raw = parsed["schedule"]
    schedule = parse_schedule(method, schedule_raw) if schedule_raw is not None else ScheduleConfig()
    lora = parse_lora(method, parsed["lora"]) if parsed["lora"] is not None else None
    parallel = parse_parallel(method, parsed["parallel"]) if parsed["parallel"] is not None else None
    clip = parsed["gradClip"]
    if clip is not None and clip <= 0:
        raise parsed.fail(f'"gradClip" must be > 0 or null, got {clip:g}')
    config = TrainerConfig(
        loss_wire=loss_wire,
        loss=loss,
        optimizer=optimizer,
        schedule=schedule,
        grad_clip=clip,
        micro_batch_tokens=parsed["microBatchTokens"],
        ref_model=parsed["refModel"],
        autocast=parsed["autocast"],
        lora=lora,
        parallel=parallel,
        gradient_checkpointing=parsed["gradientCheckpointing"],
    )
    return CreateArgs(parsed["model"], config, parsed["replace"])


CREATE_ARGS = ArgsSchema(
    (
        MODEL_ARG,
        Arg("loss", "object"),
        Arg("optimizer", "object", default=None),
        Arg("schedule", "object", default=None),
        Arg("gradClip", "number", default=DEFAULT_GRAD_CLIP, nullable=True),
        Arg("microBatchTokens", "integer", default=None, minimum=1, nullable=True),
        Arg("refModel", "string", default=None, nullable=True, non_empty=True),
        Arg("autocast", "choice", choices=AUTOCAST, default=None, nullable=True),
        Arg("lora", "object", default=None, nullable=True),
        Arg("parallel", "object", default=None, nullable=True),
        Arg("gradientCheckpointing", "boolean", default=False),
        Arg("replace", "boolean", default=False),
    ),
    build=build_create,
)

CHECKPOINT_DIR = Arg("dir", "string", non_empty=True)
SAVE_CHECKPOINT_ARGS = ArgsSchema(
    (MODEL_ARG, CHECKPOINT_DIR, Arg("dataPosition", "json", default=None)),
    build=lambda parsed: CheckpointArgs(parsed["model"], parsed["dir"], parsed["dataPosition"]),
)
LOAD_CHECKPOINT_ARGS = ArgsSchema(
    (MODEL_ARG, CHECKPOINT_DIR),
    build=lambda parsed: CheckpointArgs(parsed["model"], parsed["dir"], None),
)


# ---- the trainers of this worker -----------------------------------------------------------------------


class Trainers:
    """The trainers of one worker, by model name (used from the compute thread only)."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self._trainers: dict[str, Trainer] = {}
        self._sharded: dict[str, LoadedModel] = {}
        """The models FSDP has sharded in place, by name: a new trainer needs the model loaded again."""

    def create(self, method: str, args: CreateArgs) -> Trainer:
        parallel = args.config.parallel
        group = join_group(method, parallel) if parallel is not None else None
        problem: WorkerFailure | None = None
        checked: tuple[LoadedModel, LoadedModel | None] | None = None
        try:
            checked = self._check_create(method, args)
        except WorkerFailure as failure:
            problem = failure
        # wrapping the model is collective: a rank that fails its checks fails every rank first
        agree(problem, group, "trainer_create's checks", code=BAD_ARGUMENTS)
        assert checked is not None
        loaded, ref = checked
        trainer = Trainer(loaded, args.config, ref, group)
        if trainer.sharded:
            self._sharded[args.model] = loaded
        self._trainers[args.model] = trainer
        return trainer

    def _check_create(self, method: str, args: CreateArgs) -> tuple[LoadedModel, LoadedModel | None]:
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
        if self._sharded.get(args.model) is loaded:
            raise WorkerFailure(
                BAD_ARGUMENTS,
                f"{method}: model {args.model!r} was sharded by an earlier FSDP trainer; load it again "
                "(load_model with replace) before creating a new trainer",
            )
        return loaded, self._ref(method, loaded, args.config.ref_model)

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
    """The request's batch; in a trainer group, every rank fails when one rank's shard is bad (before any
    collective could leave the others waiting)."""
    loaded = trainer.loaded
    problem: WorkerFailure | None = None
    batch: TrainBatch | None = None
    try:
        batch = read_train_batch(
            ctx.method,
            single_batch(ctx),
            trainer.needs(),
            vocab_size=vocab_size(loaded),
            max_positions=max_positions(loaded),
        )
    except WorkerFailure as failure:
        problem = failure
    agree(problem, trainer.group, "its batch")
    assert batch is not None
    return batch


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
    registry.add("trainer_create", trainer_create, thread="compute", args=CREATE_ARGS)
    registry.add("train_step", train_step, thread="compute", args=ONLY_MODEL_ARGS, payloads=batch)
    registry.add("compute_loss", compute_loss, thread="compute", args=ONLY_MODEL_ARGS, payloads=batch)
    registry.add("trainer_state", trainer_state, thread="compute", args=ONLY_MODEL_ARGS)
    registry.add("trainer_close", trainer_close, thread="compute", args=ONLY_MODEL_ARGS)
    registry.add("save_checkpoint", save, thread="compute", args=SAVE_CHECKPOINT_ARGS)
    registry.add("load_checkpoint", load, thread="compute", args=LOAD_CHECKPOINT_ARGS)
    return trainers
