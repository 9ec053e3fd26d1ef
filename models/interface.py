"""The interface between the train loop and a model, written down: `TrainingModel`.

training/trainer.py's Trainer calls exactly these members, and nothing else, on the model named by
`model` in the options; main_test.py uses `restorer_class`. Any class registered with
`@MODELS.register(...)` must provide them (tests/test_structure.py checks every registered model
against this Protocol, names and parameters). ModelPlain (models/model_plain.py) implements them
all for image restoration; the other models extend it.
"""
from typing import (Any, ClassVar, ContextManager, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple,
                    runtime_checkable)

import torch
from torch import nn

from models.evaluation import Evaluation, WriteItem


@runtime_checkable
class TrainingModel(Protocol):
    """A trainable model as the loop sees it. Methods marked "collective" must be called by every rank."""

    restorer_class: ClassVar[type]  # how main_test.py runs the trained network (models/restorer.py, video_restorer.py)
    channels_last: bool  # netG's memory format (`train.channels_last` resolved): checkpoints record it for a resume

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False) -> None:
        """Build networks, losses, optimizers and schedules from the validated options (DDP-wrapped when
        distributed); load `path.pretrained_*` weights."""

    def network_info(self) -> str:
        """One log line: the networks, their parameter counts, the optimizer."""

    def check_sample(self, sample: Dict[str, Any], where: str,
                     channels: Optional[str] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Run one training sample through every network before anything is written: a network that
        cannot take the data is a one-line UserError naming the option (`channels`: what the dataset says
        decides its channel count, e.g. `1-channel gray images (is_color false)`)."""

    def check_test_sample(self, sample: Dict[str, Any], where: str) -> None:
        """Score one test item's target with every validation metric before anything is written: a test
        image a metric cannot take (NIQE's two 96x96 blocks) is a one-line UserError naming the section."""

    def end_iteration(self, step: int) -> None:
        """After every iteration, and with the start iteration before the first (BatchNorm folding...)."""

    def backward(self, batches: Sequence[Dict[str, Any]]) -> torch.Tensor:
        """Accumulate the gradients of the mean loss over the micro-batches; the loss, on the device."""

    def finalize_gradients(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """Make the gradients final (unscale); whether the step is sound, a device bool (no host sync)."""

    def step(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor] = None) -> None:
        """Apply the gradients unless `applied` (the loop's verdict, same on every rank) is False."""

    def log_losses(self) -> Dict[str, float]:
        """Collective: the mean losses since the last call, over ranks (the one host read per print)."""

    def iteration_losses(self) -> Tuple[List[Optional[str]], torch.Tensor]:
        """The loss terms of the last `backward` as a device vector (unsynced, never read on the hot path) and
        their names as the log writes them (None for an entry that is no loss): the non-finite gate keeps which
        were finite at the first skipped step, so that a stop can name them."""

    def current_lr(self) -> float:
        """The learning rate of the main optimizer's first group, for the log."""

    def lr_schedule(self, iterations: Sequence[int]) -> List[float]:
        """The learning rate the schedule gives the main optimizer's first group at each of `iterations`
        (curves.png draws the plan next to the logged values)."""

    def lr_phases(self) -> List[int]:
        """The iterations where that schedule changes its formula (warm-up end, decay start, milestones): the plan
        samples each, so curves.png draws a corner where it is."""

    def eval_weights(self) -> ContextManager[None]:
        """Every rank: the networks at their evaluation weights inside the context (a schedule-free optimizer's
        average), at their training weights after. The loop validates and writes checkpoints inside it."""

    def networks(self) -> List[nn.Module]:
        """Every trained network whose parameters must be identical on all ranks (replica checks)."""

    def validate(self, loader: Iterable[Dict[str, Any]], num_items: int, *, score_input: bool = False,
                 num_previews: int = 0, write_item: Optional[WriteItem] = None) -> Evaluation:
        """Collective: the eval network through models/evaluation.py's loop."""

    def state_files(self) -> Dict[str, Any]:
        """The weight files of a checkpoint, by kind ('G', 'E', 'D'): KAIR-compatible state_dicts."""

    def weights_finite(self) -> bool:
        """Whether every floating-point weight is finite (a poisoned save is never written)."""

    def training_state(self) -> Dict[str, Any]:
        """Optimizers, schedules, scalers: what a resume needs beyond the weights."""

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """Restore `state_files`/`training_state` from a checkpoint before training resumes."""
