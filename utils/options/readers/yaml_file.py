"""The YAML reader: BasicSR's and traiNNer-redux's option files as plain JSON-like data, with the line of every key.

PyYAML (SafeLoader, YAML 1.1 as BasicSR reads it: `1e-4` without a dot is a string, `!!float 1e-4` a number) builds
the node tree; this module walks it itself so that each key's line is kept for the messages (`file:line: key: ...`)
and so that what JSON cannot hold is refused where it stands: a duplicate key (PyYAML keeps the last silently), a key
that is not a string, a date, a binary value, a non-finite number, nesting deeper than `MAX_DEPTH`. Anchors and
aliases (`&a`, `*a`) and merge keys (`<<: *a`) are resolved as PyYAML resolves them.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Set, Tuple, Union

from utils.options.messages import options_error
from utils.options.readers.jsonc import read_text
from utils.options.values import MAX_DEPTH, check_values

KeyPath = Tuple[Union[str, int], ...]  # ('train', 'losses', 0, 'type')


@dataclass
class YamlDocument:
    """An option file read from YAML: its data, and the 1-based line of each key path (list items by index)."""
    path: str
    data: Dict[str, Any]
    lines: Dict[KeyPath, int] = field(default_factory=dict)

    def line(self, keys: KeyPath) -> int:
        """The line of `keys`, or of the nearest section above it that the file has (0: unknown, e.g. a key only
        `--set` gave)."""
        keys = tuple(keys)
        while keys:
            if keys in self.lines:
                return self.lines[keys]
            keys = keys[:-1]
        return 0


def is_yaml_file(path: str) -> bool:
    """Whether `path` names a YAML option file (by its extension, as BasicSR's and traiNNer-redux's are named)."""
    return path.lower().endswith(('.yml', '.yaml'))


def parse_yaml_file(path: str) -> YamlDocument:
    """Read a YAML option file; a syntax error is one line `file:line:col: invalid YAML: ...`."""
    import yaml  # imported only for YAML files
    text = read_text(path)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise options_error(f'{path}: the file is empty; an option file is a mapping of keys (name: ..., ...)')
        doc = YamlDocument(path, {})
        data = _Walker(loader, doc).value(node, ())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f'{path}:{mark.line + 1}:{mark.column + 1}' if mark is not None else path
        problem = ' '.join(filter(None, (e.context, e.problem))) or 'not valid YAML'
        raise options_error(f'{where}: invalid YAML: {problem}') from None
    except yaml.YAMLError as e:
        raise options_error(f'{path}: invalid YAML: {str(e).splitlines()[0]}') from None
    except RecursionError:
        raise options_error(f'{path}: invalid YAML: nested too deeply (at most {MAX_DEPTH} levels)') from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise options_error(f'{path}:{node.start_mark.line + 1}: the top level must be a mapping of keys '
                            f'(name: ..., datasets: ...), not a {type(data).__name__}')
    doc.data = data
    bad = check_values(data)
    if bad:
        raise options_error(f'{path}:{doc.line(tuple(_steps(bad[0])))}: {bad[0]}: {bad[1]}')
    return doc


def _steps(dotted: str) -> List[Union[str, int]]:
    """`a.b[2].c` (as check_values names a key) → ['a', 'b', 2, 'c']."""
    out: List[Union[str, int]] = []
    for part in dotted.split('.'):
        name, *indices = part.replace(']', '').split('[')
        out.append(name)
        out.extend(int(i) for i in indices if i.isdigit())
    return out


class _Walker:
    """Node tree → data, recording lines; scalars are built by PyYAML's own constructor (tags, `~`, `!!float`)."""

    def __init__(self, loader: Any, doc: YamlDocument):
        self.loader = loader
        self.doc = doc
        self.own: Set[KeyPath] = set()  # keys written in their mapping (not merged in): these may not repeat

    def fail(self, node: Any, keys: KeyPath, problem: str) -> None:
        where = '.'.join(str(k) for k in keys) or 'top level'
        raise options_error(f'{self.doc.path}:{node.start_mark.line + 1}: {where}: {problem}')

    def value(self, node: Any, keys: KeyPath) -> Any:
        import yaml
        if len(keys) > MAX_DEPTH:
            self.fail(node, keys, f'nested too deeply (at most {MAX_DEPTH} levels)')
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, keys)
        if isinstance(node, yaml.SequenceNode):
            out = []
            for i, item in enumerate(node.value):
                self.doc.lines[keys + (i,)] = item.start_mark.line + 1
                out.append(self.value(item, keys + (i,)))
            return out
        value = self.loader.construct_object(node, deep=True)
        if value is not None and not isinstance(value, (bool, int, float, str)):
            self.fail(node, keys, f'{type(value).__name__} values (here {node.value!r}) are not option values; '
                                  f'quote it to make it a string')
        return value

    def mapping(self, node: Any, keys: KeyPath) -> Dict[str, Any]:
        own = sum(1 for k, _ in node.value if k.tag != 'tag:yaml.org,2002:merge')
        self.loader.flatten_mapping(node)  # merge keys (`<<: *defaults`) become ordinary keys, before the own ones
        merged = len(node.value) - own
        out: Dict[str, Any] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.loader.construct_object(key_node, deep=True)
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                self.fail(key_node, keys, f'key {key_node.value!r} is not a name; option keys are names')
            key = str(key)
            if key in out and i >= merged and (keys + (key,)) in self.own:
                self.fail(key_node, keys + (key,), f'duplicate key (also on line {self.doc.lines[keys + (key,)]}); '
                                                   f'YAML readers keep one of them silently')
            self.doc.lines[keys + (key,)] = key_node.start_mark.line + 1
            if i >= merged:
                self.own.add(keys + (key,))
            out[key] = self.value(value_node, keys + (key,))
        return out
