"""Names other trainers' option files give this project's members, declared by the members themselves.

BasicSR's and traiNNer-redux's YAML files (readers/basicsr/) choose networks, datasets, losses, optimizers,
schedulers and models by `type:` names of their own (`RRDBNet`, `hat_m`, `PairedImageDataset`, `CharbonnierLoss`,
`AdamW`, `CosineAnnealingRestartLR`, `ESRGANModel`), with their own keyword names and defaults. A member that
is what such a name builds says so where it registers (`REGISTRY.register(name, foreign=[Foreign(...)])`): adding
a network that BasicSR's files name is one edit of that network's file. The registries hand the declarations to
the reader (option_rules.py assembles them), which knows no member.

A `Foreign` is read in this order for one section of the file (`network_g`, `pixel_opt`, `optim_g`, a
dataset, ...): its `requires` pick the declaration (CharbonnierLoss with `reduction: sum` is another member than
with `mean`), `defaults` fill the keys the file leaves out where their defaults differ from ours, `refused` and
`unneeded` settle the keys that cannot or need not be honoured, `convert` rewrites values spelled differently,
and `keys` renames the rest (a key not listed keeps its name when `passthrough`: then the member's own key check
judges it, in the file's spelling).
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

BASICSR = 'BasicSR'
REDUX = 'traiNNer-redux'
TRAINERS = (BASICSR, REDUX)


class Only:
    """A `Foreign.unneeded` entry: the values of a key that change nothing here (another is refused), and why (the
    log line's words); `...` for any value (a key that has nothing to act on here, e.g. a scoring border of a set
    without targets)."""

    def __init__(self, values: Any, why: str = ''):
        self.any = values is ...
        self.values = tuple(values) if isinstance(values, (tuple, list, set, frozenset)) else (values,)
        self.why = why


class Refusal(ValueError):
    """A value a `Foreign.convert` function cannot honour: its message says why (read after `key: value:`)."""


@dataclass(frozen=True)
class Foreign:
    """One name another trainer writes for this member, and how that section's keys become the member's.

    `name`: the `type:` value as `trainer` writes it (BasicSR's registries match it exactly, traiNNer-redux's in any
    case). `keys`: their key → our key (unprefixed: the member's own key; the reader adds the section's prefix,
    `G_optimizer_`, `G_`, ...). `defaults`: their key → their default, used where the file leaves the key out and
    our member's default differs. `requires`: their key → the value this declaration stands for (another value
    picks another declaration, or is refused when none takes it); absent keys count as their `defaults`.
    `unneeded`: their key → the value(s) that change nothing here (another value is refused with `why`, read as
    "only X here"). `refused`: their key → why no value of it can be honoured. `convert`: their key → a function
    of the value giving ours (raising Refusal). `passthrough`: keys not named anywhere keep their name.
    `note`: one line the log shows when this declaration is used (what differs, if anything). `ours`: the member
    (the registry fills it). An our key starting with "/" is a whole dotted key (`/val.padding`: a key a dataset
    section of theirs holds that is the model's here). A model's `convert` rewrites the values of our train keys
    its model class reads otherwise (ESRGANModel's relativistic `gan_type`)."""
    name: str
    trainer: str = BASICSR
    keys: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    requires: Mapping[str, Any] = field(default_factory=dict)
    unneeded: Mapping[str, Any] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    convert: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    passthrough: bool = True
    note: str = ''
    ours: str = ''

    def matches(self, section: Mapping[str, Any]) -> bool:
        """Whether `section` (their keys) is what this declaration stands for (`requires`)."""
        return all(section.get(k, self.defaults.get(k)) == v for k, v in self.requires.items())



# A vocabulary: kind ('network', 'dataset', 'loss', 'optimizer', 'scheduler', 'model', 'metric') → their name → the
# declarations of that name (several when `requires` tells them apart), as the registries collected them.
Vocabulary = Mapping[str, Mapping[str, Sequence[Foreign]]]


def lookup(vocabulary: Vocabulary, kind: str, name: str, trainer: str) -> List[Foreign]:
    """The declarations of `name` among `kind` for files of `trainer` (a name means what its trainer builds: BasicSR's
    `RCAN` is not traiNNer-redux's `rcan`): exact spelling first (BasicSR's registry is case-sensitive), then, for
    traiNNer-redux's files, any case (its registry lower-cases names)."""
    table = vocabulary.get(kind, {})
    exact = [f for f in table.get(name, ()) if f.trainer == trainer]
    if exact or trainer != REDUX:
        return exact
    return [f for their, fs in table.items() if their.lower() == name.lower() for f in fs if f.trainer == trainer]


def names_of(vocabulary: Vocabulary, kind: str, trainer: str) -> List[str]:
    """Every name of `kind` the members declare for `trainer`'s files (for the did-you-mean of an unknown one)."""
    return sorted(their for their, fs in vocabulary.get(kind, {}).items() if any(f.trainer == trainer for f in fs))


def collect(declared: Mapping[str, Sequence[Foreign]]) -> Dict[str, List[Foreign]]:
    """{their name: declarations} from a registry's {our name: declarations} (their `ours` filled in)."""
    out: Dict[str, List[Foreign]] = {}
    for ours, foreign in declared.items():
        for f in foreign:
            out.setdefault(f.name, []).append(f if f.ours else _with_ours(f, ours))
    return out


def _with_ours(f: Foreign, ours: str) -> Foreign:
    from dataclasses import replace
    return replace(f, ours=ours)


def first(declarations: Sequence[Foreign], section: Mapping[str, Any]) -> Optional[Foreign]:
    """The declaration whose `requires` the section meets, or None."""
    return next((f for f in declarations if f.matches(section)), None)
