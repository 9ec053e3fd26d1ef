"""The checking of one parsed option dict, section by section: unknown keys with a did-you-mean, each value
against its `Key` (types, check), defaults filled, the members that type keys choose (`Choice`) with their own
keys, and names looked up in their registries. Every error names `file: section.key` (or the `--set` argument
that gave the key); keys accepted and ignored become notes for the log.

validate.py walks an option file's sections with it; it knows no section itself.
"""
import copy
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from utils.errors import UserError
from utils.options.keys import IGNORED, REQUIRED, Choice, Key, inferred_types
from utils.options.messages import kind_of, located, options_error, source_of
from utils.options.values import show
from utils.suggest import did_you_mean

T = TypeVar('T')


def _type_name(types: Sequence[type]) -> str:
    names = {bool: 'true/false', int: 'an integer', float: 'a number', str: 'a string',
             list: 'a list', dict: 'an object', type(None): 'null'}
    return ' or '.join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _has_type(value: Any, types: Tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number here
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


class Validator:
    """Validates one parsed option dict; every error names `file: section.key`."""

    def __init__(self, source: str, overridden: Optional[Mapping[str, str]] = None,
                 spelling: Optional[Mapping[str, str]] = None):
        self.source = source
        self.overridden = dict(overridden or {})  # {KEY.PATH: --set argument} (apply_overrides)
        self.spelling = dict(spelling or {})  # {KEY.PATH: how a translated file names it} (messages.located)
        self.notes: List[str] = []  # warnings for the log (keys accepted and ignored)

    def fail(self, where: str, msg: str) -> None:
        """Stop with `msg` about option `where`, naming the file or the `--set` argument that gave it."""
        raise options_error(f'{located(where, self.source, self.overridden, self.spelling)}: {msg}')

    def not_a_section(self, where: str, data: Any, holds: str = 'keys') -> None:
        """A list, string or number given where a section (an object of `holds`) belongs."""
        self.fail(where or 'top level', f'expected a section (an object of {holds}, {{...}}), got '
                                        f'{kind_of(data)}: {show(data, where.rsplit(".", 1)[-1])}')

    def unknown(self, where: str, key: str, allowed: Iterable[str]) -> None:
        """Stop at a key the section does not take, with the nearest one it does."""
        allowed = list(allowed)
        self.fail(f'{where}{key}', f'unknown key{did_you_mean(key, allowed)}')

    def value(self, where: str, value: Any, spec: Key) -> None:
        """Check one given value against its type and check."""
        if spec.types is not None and not _has_type(value, spec.types):
            self.fail(where, f'expected {_type_name(spec.types)}, got {show(value, where.rsplit(".", 1)[-1])}')
        problem = spec.check(value) if spec.check else None
        if problem:
            self.fail(where, f'{show(value, where.rsplit(".", 1)[-1])} {problem}')

    def section(self, data: Any, schema: Dict[str, Any], where: str, nested: bool = True) -> Dict[str, Any]:
        """Validate against `{key: Key or plain default}` (or a nested schema dict when `nested`); fill the defaults."""
        if not isinstance(data, dict):
            self.not_a_section(where.rstrip('.'), data)
        out: Dict[str, Any] = {}
        for key in data:
            if key not in schema:
                self.unknown(where, key, schema)
        ignored = [key for key in data if schema[key] is IGNORED]
        if ignored:
            section = where.rstrip('.')
            name = data.get('net_type', data.get('dataset_type'))
            kind = f' ({name})' if isinstance(name, str) else ''
            self.notes.append(f'{section}{kind}: {", ".join(ignored)} ignored: not read by this {section}, '
                              f'which KAIR ignores too')
        for key, spec in schema.items():
            if spec is IGNORED:
                continue
            if nested and isinstance(spec, dict):
                out[key] = self.section(data.get(key, {}), spec, f'{where}{key}.')
                continue
            if not isinstance(spec, Key):
                spec = Key(spec, inferred_types(spec))
            if key not in data:
                if spec.default is REQUIRED:
                    self.fail(f'{where}{key}', 'required key is missing')
                out[key] = copy.deepcopy(spec.default)
                continue
            self.value(f'{where}{key}', data[key], spec)
            out[key] = data[key]
        return out

    def choices(self, data: Dict[str, Any], schema: Dict[str, Any], choices: Mapping[str, Choice],
                where: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(`data`, `schema`) of a section whose type keys choose registered members: the schema gains the
        chosen members' keys; keys only other members read are dropped from the data with one note per
        type key (and stay in the schema as IGNORED, for the did-you-mean of a typo).

        A type key names one member (a string), none (null), or several: a list of names, or an object
        whose keys are names (`G_extra_losses: {"fft": 0.1}`); type keys sharing a prefix keep the keys
        any of them chose."""
        data, schema = dict(data), dict(schema)
        chosen_by: Dict[str, Tuple[Choice, List[str], Dict[str, Any]]] = {}
        for type_key, choice in choices.items():
            spec = schema[type_key] if isinstance(schema[type_key], Key) else Key(schema[type_key])
            value = data[type_key] if type_key in data else spec.default
            self.value(f'{where}{type_key}', value, spec)
            names = [] if value is None else [value] if isinstance(value, str) else list(value)
            chosen: Dict[str, Any] = {}
            for name in names:
                self.named(f'{where}{type_key}', name, choice.registry.get)
                chosen.update({choice.prefix + k: s for k, s in choice.registry.options(name, where + type_key).items()})
            chosen_by[type_key] = (choice, names, chosen)
        every_chosen = {k for _, _, chosen in chosen_by.values() for k in chosen}
        for _, _, chosen in chosen_by.values():
            schema.update(chosen)
        # type keys choosing from one registry with one prefix (G_lossfn_type, G_extra_losses) read one set of
        # keys: a key none of their members reads is noted once, naming what each of them chose
        groups: Dict[Tuple[int, str], List[str]] = {}
        for type_key, (choice, _, _) in chosen_by.items():
            groups.setdefault((id(choice.registry), choice.prefix), []).append(type_key)
        for type_keys in groups.values():
            choice = chosen_by[type_keys[0]][0]
            names = {n for k in type_keys for n in chosen_by[k][1]}
            others = {choice.prefix + k for member in choice.registry.names() if member not in names
                      for k in choice.registry.options(member, where + type_keys[0])}
            others -= every_chosen | set(schema)
            ignored = [key for key in data if key in others]
            if ignored:
                empty = 'null' if len(type_keys) == 1 else 'none'
                shown = ' nor '.join(f'{k} {", ".join(chosen_by[k][1]) or empty}' for k in type_keys)
                self.notes.append(f'{", ".join(where + k for k in ignored)}: not read by {shown}; ignored')
            data = {k: v for k, v in data.items() if k not in others}
            schema.update({k: IGNORED for k in sorted(others)})
        return data, schema

    def named(self, where: str, data: Any, lookup: Callable[[str, str], T]) -> T:
        """`lookup(name, where)` of a string value; its UserError becomes this file's error."""
        if not isinstance(data, str):
            self.fail(where, f'expected a string, got {show(data, where.rsplit(".", 1)[-1])}')
        try:
            return lookup(data, where)
        except UserError as e:
            if where in self.spelling:
                raise options_error(f'{self.spelling[where]}: {e}') from None
            raise options_error(f'{source_of(where, self.source, self.overridden)}: {e}') from None

    def names(self, opt: Dict[str, Any], names: Mapping[str, Callable[[str, str], Any]]) -> None:
        """Look up every name the completed options give at the key paths of `names` (`Rules.names`), so that an
        unknown one stops the run before anything is written; paths the options do not have are skipped."""
        for path, lookup in names.items():
            *sections, key = path.split('.')
            node = opt
            for s in sections:
                node = node[s] if s in node else {}
            if key in node and node[key] is not None:
                self.named(path, node[key], lookup)

