"""One registry type for everything chosen by name in the options: networks, models, datasets,
demo data, losses, optimizers, schedulers, weight initialisers.

A registry maps names to objects. Objects register themselves with `@REGISTRY.register(name)` in
the module that defines them, so adding one is one new file. Registries whose members live in
their own modules find them in one folder (`models/networks/` for networks): a lookup imports
`<package>.<name>` (the module named by the pattern) when that module exists, else every module of
the folder whose name matches the pattern, so that a name registered under another file name (and
every name, for the did-you-mean) is found. Subfolders (the networks' shared `layers/`) hold no
members. Only what is needed is imported: building one network does not import the others (VRT's
module pulls in torchvision).

A member declares the option keys it reads where it is defined: `register(name, options={key: Key or
default})`, or an `OPTIONS` attribute on the class or function. Members chosen by a type key read them
with a prefix (loss `G_lossfn_type` → `G_<key>`): `read` gives them back unprefixed.
"""
import fnmatch
import importlib
import importlib.util
import pkgutil
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

from utils.errors import UserError
from utils.suggest import did_you_mean

T = TypeVar('T')


class Registry:
    """name → object, filled by `register`, looked up with `get` (a one-line UserError on a miss)."""

    def __init__(self, kind: str, package: Optional[str] = None, pattern: str = '*', listing: Optional[str] = None):
        """`kind` names the members in messages ("network"); members live in modules of `package`
        whose names match the glob `pattern` ("network_*"), or, without a package, in the module
        that creates the registry. `listing`: the word `--describe` lists the members by (default: the
        kind's first word), named in the message for an unknown name."""
        self.kind = kind
        self.listing = listing or kind.split()[0]
        self.package = package
        self.pattern = pattern
        self._members: Dict[str, Any] = {}
        self._options: Dict[str, Dict[str, Any]] = {}
        self._foreign: Dict[str, List[Any]] = {}
        self._scanned = False

    def register(self, *names: str, options: Optional[Mapping[str, Any]] = None,
                 foreign: Sequence[Any] = ()) -> Callable[[T], T]:
        """Decorator registering a class or function under one or more names; `options` declares the
        keys it reads (for objects that cannot carry an `OPTIONS` attribute, such as torch's classes);
        `foreign`: the names other trainers' option files give it (utils/options/foreign.py `Foreign`),
        declared for the first name."""
        def deco(obj: T) -> T:
            for name in names:
                if name in self._members and self._members[name] is not obj:
                    raise ValueError(f'{self.kind} {name!r} registered twice')
                self._members[name] = obj
                if options is not None:
                    self._options[name] = dict(options)
            if foreign:
                self._foreign.setdefault(names[0], []).extend(foreign)
            return obj
        return deco

    def _import_conventional(self, name: str) -> None:
        """Import `<package>.<pattern with name>` if that module exists (e.g. models.networks.vrt)."""
        if self.package is None or '*' not in self.pattern:
            return
        if not name.isidentifier():
            return
        module = f'{self.package}.{self.pattern.replace("*", name, 1)}'
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is None:  # a module, not a subfolder
            importlib.import_module(module)

    def _import_all(self) -> None:
        if self.package is None or self._scanned:
            return
        package = importlib.import_module(self.package)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.ispkg and fnmatch.fnmatchcase(info.name, self.pattern):
                importlib.import_module(f'{self.package}.{info.name}')
        self._scanned = True

    def get(self, name: str, where: str) -> Any:
        """The object registered as `name`; `where` (e.g. "netG.net_type") prefixes the error."""
        if name not in self._members:
            self._import_conventional(name)
        if name not in self._members:
            self._import_all()
        if name not in self._members:  # the did-you-mean, and where the whole list is (not the list itself)
            raise UserError(f'{where}: unknown {self.kind} "{name}"{did_you_mean(name, self._members)}; '
                            f'{len(self.names())} known: --describe {self.listing} lists them (or docs/options.md)')
        return self._members[name]

    def options(self, name: str, where: str) -> Dict[str, Any]:
        """The option keys member `name` reads, `{key: Key or default}` (unprefixed; empty when it reads none)."""
        obj = self.get(name, where)
        return self._options[name] if name in self._options else dict(getattr(obj, 'OPTIONS', {}))

    def read(self, name: str, section: Mapping[str, Any], prefix: str, where: str) -> Dict[str, Any]:
        """Member `name`'s keys from a validated options `section`, where they are `<prefix><key>`, unprefixed."""
        return {key: section[prefix + key] for key in self.options(name, where)}

    def foreign(self) -> Dict[str, List[Any]]:
        """{member name: the names other trainers give it} (`register(foreign=...)`), every member module
        imported first: what the readers of other trainers' option files look names up in."""
        self._import_all()
        return {name: list(f) for name, f in self._foreign.items()}

    def names(self) -> List[str]:
        """Every registered name, importing all member modules first."""
        self._import_all()
        return sorted(self._members)


def declared(section: Mapping[str, Any], key: str, absent: Any) -> Any:
    """`section[key]` where the section has `key`, else `absent`: for the one kind of key a validated section may lack.

    After validation a section holds every key its member declares (a network's constructor parameters, a dataset
    type's OPTIONS), each filled with its default, and no other key. A key that only some members declare (a
    network's `window_size`, a dataset's `scale`), or a `datasets` phase the option file leaves out, is the one a
    reader may find missing, and `absent` is what its absence means there; every other key is read directly.
    """
    return section[key] if key in section else absent
