"""The state of one translation: the file's data and lines, what is written where, and what is said about it.

Every value put into the options remembers the file's key it came from (`put`), so that the validator names the
file's key and line in its messages (`spelling`), `--set` arguments are named for the keys they gave (`overridden`),
and scripts/convert_options.py can comment each value with its source. Keys that need not be honoured here are
collected for one log line (`unneeded`); a key that cannot be honoured stops the translation (`refuse`).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from utils.errors import OptionsError
from utils.options.foreign import Foreign, Vocabulary
from utils.options.messages import options_error, source_of
from utils.options.readers.yaml_file import KeyPath, YamlDocument
from utils.options.values import show
from utils.suggest import did_you_mean


@dataclass(frozen=True)
class Origin:
    """Where a value of the translated options comes from: the file's key (`train.optim_g.lr`) and its line (0: not
    in the file: a default of the other trainer, or a `--set` that added it), or `why` for a value the translation
    decided (the model from `model_type`, a preset's size)."""
    key: str
    line: int
    why: str = ''


def shown(keys: KeyPath) -> str:
    """A key path as the messages write it: `train.losses[1].type`."""
    out = ''
    for k in keys:
        out += f'[{k}]' if isinstance(k, int) else (f'.{k}' if out else str(k))
    return out


@dataclass
class Context:
    """One translation in progress. `trainer`: whose file it is (BASICSR or REDUX: some keys mean different things).
    `overridden`: {their key path as `shown` writes it: the `--set` argument} (utils/options/overrides.py).
    `testing`: read for main_test, as their test.py reads it: every dataset section but `train` is a test set,
    whatever the `val` section says about validation during training."""
    doc: YamlDocument
    trainer: str
    vocabulary: Vocabulary = field(default_factory=dict)
    overridden: Mapping[str, str] = field(default_factory=dict)
    testing: bool = False
    model: str = ''  # our model, chosen first (model_type, or what a traiNNer-redux file trains)
    model_type: str = ''  # their model class (BasicSR's model_type), '' for a traiNNer-redux file
    model_foreign: Optional[Foreign] = None  # the model's declaration (its `convert`: model-specific loop values)
    out: Dict[str, Any] = field(default_factory=dict)
    origins: Dict[str, Origin] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    unneeded_keys: List[Tuple[str, str]] = field(default_factory=list)  # (their key, why)
    # BasicSR's top-level Real-ESRGAN degradation keys, placed once the training set is known: {key: (keys, value)}
    pending_degradation: Dict[str, Tuple[KeyPath, Any]] = field(default_factory=dict)
    val_border: Optional[Tuple[Any, KeyPath]] = None  # the PSNR/SSIM crop_border and where the file gives it
    mapped: int = 0

    # --- where a message points -------------------------------------------------------------------------------------

    def where(self, keys: KeyPath) -> str:
        """`file:line: key` (or `--set key=value: key`) for their key path `keys`."""
        name = shown(keys)
        source = source_of(name, self.doc.path, self.overridden)
        if source != self.doc.path:
            return f'{source}: {name}'
        line = self.doc.line(keys)
        return f'{self.doc.path}:{line}: {name}' if line else f'{self.doc.path}: {name}'

    def refuse(self, keys: KeyPath, why: str, value: Any = None, show_value: bool = True) -> OptionsError:
        """The error for a key that cannot be honoured here: `file:line: key: value: why`."""
        shown_value = f'{show(value, str(keys[-1]) if keys else "")}: ' if show_value and value is not None else ''
        return options_error(f'{self.where(keys)}: {shown_value}{why}')

    def unknown(self, keys: KeyPath, known: Sequence[str], what: str) -> OptionsError:
        """The error for a key nothing here knows, with the nearest known one."""
        return options_error(f'{self.where(keys)}: unknown key{did_you_mean(str(keys[-1]), known)} ({what}; '
                             f'docs/option_files.md lists the keys read from {self.trainer} files)')

    # --- what goes where ------------------------------------------------------------------------------------------------

    def put(self, ours: str, value: Any, keys: Optional[KeyPath], why: str = '') -> None:
        """Set our dotted key `ours` to `value`, from their key path `keys` (None: decided by the translation, `why`)."""
        node = self.out
        *sections, last = ours.split('.')
        for s in sections:
            node = node.setdefault(s, {})
        node[last] = value
        if keys is not None:
            self.origins[ours] = Origin(shown(keys), self.doc.line(keys), why)
            self.mapped += 1
        else:
            self.origins[ours] = Origin('', 0, why)

    def spell(self, ours: str, keys: KeyPath) -> None:
        """Remember that our key `ours` is their `keys` even where the file leaves it out (a missing required key, a
        default the validator fills, is then named in the file's spelling)."""
        self.origins.setdefault(ours, Origin(shown(keys), self.doc.line(keys)))

    def rename_origin(self, their: str, keys: KeyPath, why: str) -> None:
        """Values put from their key `their` (as `shown`) come from `keys` instead (a key the translation rewrote
        into another before the member read it: traiNNer-redux's lq_size into gt_size)."""
        for ours, origin in self.origins.items():
            if origin.key == their:
                self.origins[ours] = Origin(shown(keys), self.doc.line(keys), why)

    def has(self, ours: str) -> bool:
        node: Any = self.out
        for s in ours.split('.'):
            if not isinstance(node, dict) or s not in node:
                return False
            node = node[s]
        return True

    def get(self, ours: str) -> Any:
        node: Any = self.out
        for s in ours.split('.'):
            node = node[s]
        return node

    def unneeded(self, keys: KeyPath, why: str) -> None:
        """Their key is accepted and not needed here (it steers their machinery, or what it asks for is what this
        project does anyway): listed once in the log."""
        self.unneeded_keys.append((shown(keys), why))

    def note(self, line: str) -> None:
        self.notes.append(line)

    # --- reading their sections -----------------------------------------------------------------------------------------

    def section(self, keys: KeyPath, value: Any, what: str = 'keys') -> Dict[str, Any]:
        """`value` as a section (a mapping), else the error naming `keys`."""
        if not isinstance(value, dict):
            raise self.refuse(keys, f'expected a section (a mapping of {what}), got {show(value)}', show_value=False)
        return value

    def spelling(self) -> Dict[str, str]:
        """{our dotted key: how messages name it}: `file:line: their.key` for each value the file gave."""
        out = {}
        for ours, origin in self.origins.items():
            if not origin.key:
                continue
            source = source_of(origin.key, self.doc.path, self.overridden)
            if source != self.doc.path:
                out[ours] = f'{source}: {origin.key}'
            else:
                out[ours] = f'{self.doc.path}:{origin.line}: {origin.key}' if origin.line else \
                    f'{self.doc.path}: {origin.key}'
        return out

    def our_overridden(self) -> Dict[str, str]:
        """{our dotted key: the `--set` argument that gave it}, for the validator's messages."""
        out = {}
        for ours, origin in self.origins.items():
            given = [k for k in self.overridden if origin.key == k or origin.key.startswith((k + '.', k + '['))]
            if given:
                out[ours] = self.overridden[max(given, key=len)]
        return out

