"""`Rules`: what the layers above `utils` require of the options, handed to the validator by the entry point
(option_rules.py assembles it from the registries), so that this package knows no network, dataset or model."""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from utils.options.keys import Choice


@dataclass(frozen=True)
class Rules:
    """What the layers above `utils` require of the options; the entry point assembles it.

    `network(net_type, where)` and `dataset(dataset_type, where)` return `{key: default}` for the
    keys that section accepts (a default may be REQUIRED or a `Key` with its own types and check)
    and raise UserError naming `where` for an unknown name; a default of IGNORED accepts a key and
    drops it with a note. `names` maps a key path ('model', 'train.G_lossfn_type', ...) to a lookup
    `(name, where)` that raises UserError for an unknown name: every name in the options is checked
    before anything is written (paths the chosen model does not have are skipped).
    """
    network: Callable[[str, str], Dict[str, Any]]
    dataset: Callable[[str, str], Dict[str, Any]]
    names: Mapping[str, Callable[[str, str], Any]] = field(default_factory=dict)
    # `model(name, where)`: what the model adds, {'train': {...}, 'path': {...}, 'val': {...}, 'netD': True,
    # 'choices': {train type key: Choice}}
    model: Optional[Callable[[str, str], Dict[str, Any]]] = None
    discriminator: Optional[Callable[[str, str], Dict[str, Any]]] = None  # keys of `netD`, as `network`
    # dataset keys only training sections take: {key: why a test section has none} (an error there)
    train_only_dataset_keys: Mapping[str, str] = field(default_factory=dict)
    # type keys of other sections than `train` (whose come with the model): {section: {type key: Choice}}
    choices: Mapping[str, Mapping[str, Choice]] = field(default_factory=dict)
    # `targets(dataset_type, where)`: whether that type's items have targets (False: a test set main_test restores
    # without scoring; never a training set); validation records it in each dataset section as `_targets`
    targets: Callable[[str, str], bool] = field(default=lambda dataset_type, where: True)
    # checks of the completed options across keys: each returns (key, problem) or None
    checks: Sequence[Callable[[Dict[str, Any]], Optional[Tuple[str, str]]]] = ()
