"""Every option key the loader knows, described from the rules themselves (option_rules.py and the
registries): the generated reference (docs/options.md), the JSON Schema (options/schema.json, written by
option_schema.py) and `python main_train.py --describe <name>` all read this catalog, so none of them can
drift from what the loader accepts.

A key's facts come from its `Key` (utils/options/keys.py): default, accepted types, check and help. A check
labelled with `utils.options.rule` says what it allows in words and as JSON Schema keywords; an
unlabelled one is described by its docstring. Network keys come from constructor signatures, which
carry no help: their meaning is the network docstring's sentence naming the key in backticks, else
models/registry.py's NETWORK_KEY_HELP for KAIR's shared names; otherwise the reference says there is
none. Nothing here builds a network or a dataset; spandrel's constructors are imported for their
signatures only.
"""
import inspect
import json
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from data.registry import DATASET_KEY_HELP, DATASETS, LOADER_OPTIONS
from data.synthetic.demo import DEMO_DATA
from losses.registry import LOSSES
from metrics.registry import METRICS
from models.networks.layers.init import BN_INITS, WEIGHT_INITS
from models.optim import OPTIMIZERS
from models.registry import INIT_OPTIONS, KAIR_SHARED_KEYS, MODELS, NETWORK_KEY_HELP, NETWORKS, network_options
from models.sam import SAM_METHODS
from models.schedules import SCHEDULERS
from option_rules import option_rules
from utils.errors import UserError
from utils.options import IGNORED, INHERITED, NETWORK_SCALE_KEYS, REQUIRED, SCHEMA, Choice, Key, inferred_types
from utils.registry import Registry
from utils.suggest import did_you_mean

NO_HELP = 'no help text'
AUTO = 'auto'  # netG.net_type "auto" (models/networks/auto.py): resolved before validation, not registered
_NONE = type(None)
_WORDS = {bool: 'true/false', int: 'integer', float: 'number', str: 'string', list: 'list', dict: 'object',
          _NONE: 'null'}


# --- one key ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyInfo:
    """One key as an option file writes it (`key` with its prefix: `G_charbonnier_eps`)."""
    key: str
    default: Any                          # REQUIRED, IGNORED or the value
    types: Optional[Tuple[type, ...]]     # what the loader accepts; None: any value
    check: Optional[Callable[[Any], Optional[str]]]
    help: str
    type_text: str = ''                   # set where the loader's types say less (a network's annotation)

    @property
    def required(self) -> bool:
        """The user must give it (no default)."""
        return self.default is REQUIRED

    @property
    def ignored(self) -> bool:
        """KAIR writes it and nothing here reads it: accepted and dropped."""
        return self.default is IGNORED

    def type_words(self) -> str:
        """What the loader accepts, in the reference's words ("integer or null")."""
        if self.ignored:
            return 'any'
        if self.type_text:
            return self.type_text
        if self.types is None:
            return 'any'
        words = [_WORDS.get(t, t.__name__) for t in self.types]
        if 'integer' in words and 'number' in words:
            words.remove('integer')
        return ' or '.join(dict.fromkeys(words))

    def default_words(self) -> str:
        """The default as the reference shows it: JSON, or "required" / "ignored"."""
        if self.required:
            return 'required'
        if self.ignored:
            return 'ignored'
        return json_text(self.default)

    def allowed_words(self) -> str:
        """What the check allows: its `rule` label, else its docstring's first sentence."""
        if self.check is None:
            return ''
        allowed = getattr(self.check, 'allowed', None)
        if allowed:
            return allowed
        doc = first_line(getattr(self.check, '__doc__', None))
        return doc or 'checked when loaded'


def key_info(key: str, spec: Any, help_text: str = '', type_text: str = '') -> KeyInfo:
    """A KeyInfo of a schema entry: a `Key`, IGNORED, or a plain default (types inferred as the loader does)."""
    if isinstance(spec, Key):
        return KeyInfo(key, spec.default, spec.types if spec.types is not None else inferred_types(spec.default),
                       spec.check, spec.help or help_text, type_text)
    return KeyInfo(key, spec, None if spec is IGNORED else inferred_types(spec), None, help_text, type_text)


def plain(value: Any) -> Any:
    """`value` with tuples as lists (what JSON writes)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def is_json(value: Any) -> bool:
    """Whether `value` can be written as JSON (a default that cannot is shown as Python)."""
    try:
        json.dumps(plain(value), allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def json_text(value: Any) -> str:
    """`value` as the reference shows it: JSON where it can be, else its repr."""
    return json.dumps(plain(value), allow_nan=False) if is_json(value) else repr(value)


def first_line(doc: Optional[str]) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    if not doc:
        return ''
    para = ' '.join(inspect.cleandoc(doc).split('\n\n')[0].split())
    m = re.match(r'(.+?[.!?])(\s|$)', para)
    return (m.group(1) if m else para).strip()


# --- members -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """Where a member is chosen and where its keys go: `train.G_lossfn_type` → `train.G_<key>`."""
    section: str                   # 'train', 'val', 'netG', 'datasets.<phase>'
    type_key: str                  # 'G_lossfn_type', 'metrics', 'net_type', 'dataset_type'
    prefix: str = ''
    models: Tuple[str, ...] = ()   # the models that have this type key (empty: every option file)

    def words(self) -> str:
        """Where the member is chosen, as --describe and the reference name it ("train.G_lossfn_type")."""
        models = f' (model {", ".join(self.models)})' if self.models else ''
        return f'{self.section + "." if self.section else ""}{self.type_key}{models}'


@dataclass(frozen=True)
class Member:
    """One registered member (network, dataset, loss, ...) as the reference and --describe show it."""
    kind: str                      # 'network', 'dataset', 'loss', ...
    name: str
    summary: str
    sites: Tuple[Site, ...]
    keys: Tuple[KeyInfo, ...]      # unprefixed (a site's prefix is added where they are written)
    aliases: Tuple[str, ...] = ()  # other names of the same object
    extra: Tuple[str, ...] = ()    # more lines for --describe and the reference
    classes: Tuple[str, ...] = ()  # the name of the class (or function) registered, for --describe

    def written(self, site: Site) -> List[KeyInfo]:
        """The keys as the option file writes them at `site`."""
        return [KeyInfo(site.prefix + k.key, k.default, k.types, k.check, k.help, k.type_text) for k in self.keys]


@dataclass
class Catalog:
    """Every section's keys and every registered member; build with `catalog()`."""
    top: List[KeyInfo]
    sections: Dict[str, List[KeyInfo]]            # path, train (the loop's), val, logging
    loader: List[KeyInfo]                         # every datasets.<phase> section
    network_common: List[KeyInfo]                 # every netG/netD: init keys
    members: Dict[str, List[Member]]              # kind -> members, sorted by name
    choice_sites: Dict[str, List[Tuple[Site, Choice, Any]]] = field(default_factory=dict)  # per model

    def all_members(self) -> List[Member]:
        """Every member of every kind."""
        return [m for kind in self.members.values() for m in kind]


def summary_of(obj: Any) -> str:
    """The first sentence of the member's docstring, else of its module's (one file per member family)."""
    if obj is None or getattr(obj, '__name__', '') == '<lambda>':
        return ''
    summary = getattr(obj, 'summary', None)  # instances of one kind (optimizers) say what each is
    if isinstance(summary, str) and summary:
        return first_line(summary)
    doc = obj.__doc__ if isinstance(obj, type) else getattr(obj, '__doc__', None)
    if not doc:
        doc = getattr(sys.modules.get(getattr(obj, '__module__', '') or ''), '__doc__', None)
    return first_line(doc)


def class_names(obj: Any) -> Tuple[str, ...]:
    """The registered object's own name, which --describe also finds it by (none for a lambda)."""
    name = getattr(obj, '__name__', '')
    return (name,) if name and name != '<lambda>' else ()


def grouped(registry: Registry) -> List[Tuple[str, Tuple[str, ...], Any]]:
    """(name, aliases, object) per registered object: names sharing one object are one member (its first
    name in sorted order; `None` members, such as init "default"/"none", are kept apart)."""
    names = registry.names()
    seen: Dict[int, int] = {}
    out: List[Tuple[str, List[str], Any]] = []
    for name in names:
        obj = registry.get(name, registry.kind)
        key = id(obj)
        same_keys = key in seen and registry.options(name, name) == registry.options(out[seen[key]][0], name)
        if obj is not None and same_keys:
            out[seen[key]][1].append(name)
            continue
        seen[key] = len(out)
        out.append((name, [], obj))
    return [(n, tuple(a), o) for n, a, o in out]


def annotation_words(annotation: Any) -> str:
    """A constructor annotation in the reference's words (`Optional[List[int]]` → "list of integer or null")."""
    if annotation is inspect.Parameter.empty:
        return ''
    if isinstance(annotation, str):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        return ' or '.join(dict.fromkeys(annotation_words(a) for a in args))
    if origin in (list, tuple, typing.Sequence, Sequence) or (origin is not None and getattr(origin, '__name__', '')
                                                               in ('Sequence', 'List', 'Tuple')):
        inner = [annotation_words(a) for a in args if a is not Ellipsis]
        return f'list of {" or ".join(dict.fromkeys(inner))}' if inner else 'list'
    if origin is not None:
        return _WORDS.get(origin, getattr(origin, '__name__', str(origin)))
    return _WORDS.get(annotation, getattr(annotation, '__name__', str(annotation)))


def network_help(cls: Any) -> Dict[str, str]:
    """{key: sentence} from the class and constructor docstrings: the sentences whose first name in backticks is
    `key`."""
    texts = [getattr(cls, '__doc__', None) or '']
    init = getattr(cls, '__init__', None)
    if isinstance(init, types.FunctionType):
        texts.append(init.__doc__ or '')
    out: Dict[str, str] = {}
    for text in texts:
        flat = ' '.join(inspect.cleandoc(text).split()) if text else ''
        for sentence in re.split(r'(?<=[.;])\s+', flat):
            named = re.findall(r'`([A-Za-z_][A-Za-z0-9_]*)`', sentence)
            if named:  # the sentence is about the first key it names (others it mentions in passing)
                out.setdefault(named[0], sentence.rstrip('.;'))
    return out


def network_member(name: str, aliases: Tuple[str, ...], cls: Any) -> Member:
    """A network as a member: its keys from the constructor's signature, their meaning from its docstrings."""
    sites = (Site('netG', 'net_type'), Site('netD', 'net_type', models=models_with_netd()))
    try:
        options = network_options(name, 'describe')
        params = inspect.signature(cls.__init__).parameters
    except UserError as e:  # a spandrel net_type where spandrel is not installed: its signature is spandrel's
        return Member('network', name, summary_of(cls), sites, (), aliases, (f'keys unknown here: {e}',),
                      class_names(cls))
    from_doc = network_help(cls)
    scale_key = next((k for k in NETWORK_SCALE_KEYS if k in options), None)
    keys = []
    for key, spec in options.items():
        if key == 'net_type' or key in INIT_OPTIONS or spec is IGNORED:
            continue
        help_text = from_doc.get(key) or NETWORK_KEY_HELP.get(key, '')
        if key == scale_key:
            help_text = f'{help_text or "super-resolution factor"}; inherits the top-level scale'
        p = params.get(key)
        type_text = '' if p is None or inferred_types(spec) else annotation_words(p.annotation)
        keys.append(key_info(key, spec, help_text, type_text))
    return Member('network', name, summary_of(cls), sites, tuple(keys), aliases, classes=class_names(cls))


def models_with_netd() -> Tuple[str, ...]:
    """The models that train a discriminator (and so read a netD section)."""
    return tuple(n for n in MODELS.names() if getattr(MODELS.get(n, 'model'), 'HAS_NETD', False))


def choice_sites() -> Dict[str, List[Tuple[Site, Choice, Any]]]:
    """Per model (and '' for every file): (site, choice, the type key's default) of its type keys."""
    out: Dict[str, List[Tuple[Site, Choice, Any]]] = {}
    for section, choices in option_rules().choices.items():
        for type_key, choice in choices.items():
            out.setdefault('', []).append((Site(section, type_key, choice.prefix), choice,
                                           SCHEMA[section][type_key].default))
    for model in MODELS.names():
        cls = MODELS.get(model, 'model')
        for type_key, choice in (getattr(cls, 'CHOICES', None) or {}).items():
            spec = cls.TRAIN_OPTIONS[type_key]
            out.setdefault(model, []).append((Site('train', type_key, choice.prefix, (model,)), choice,
                                              spec.default if isinstance(spec, Key) else spec))
    return out


def chosen_members(registry: Registry, kind: str, sites: Dict[str, List[Tuple[Site, Choice, Any]]]) -> List[Member]:
    """The members of a registry a type key chooses, with every site that chooses from it (the models merged)."""
    where: Dict[Tuple[str, str, str], List[str]] = {}
    for model, entries in sorted(sites.items()):
        for site, choice, _ in entries:
            if choice.registry is registry:
                where.setdefault((site.section, site.type_key, site.prefix), []).append(model)
    every = MODELS.names()
    member_sites = tuple(Site(sec, tk, prefix, () if '' in models or sorted(models) == every else tuple(models))
                         for (sec, tk, prefix), models in where.items())
    out = []
    for name, aliases, obj in grouped(registry):
        keys = tuple(key_info(k, spec) for k, spec in registry.options(name, kind).items())
        out.append(Member(kind, name, summary_of(obj), member_sites, keys, aliases, classes=class_names(obj)))
    return out


def model_member(name: str) -> Member:
    """A model as a member: the train, path and val keys it adds, its type keys, netD and its evaluator."""
    cls = MODELS.get(name, 'model')
    keys = [key_info(k, spec) for k, spec in (getattr(cls, 'TRAIN_OPTIONS', None) or {}).items()]
    path = [key_info(f'path.{k}', spec) for k, spec in (getattr(cls, 'PATH_OPTIONS', None) or {}).items()]
    val = [key_info(f'val.{k}', spec) for k, spec in (getattr(cls, 'VAL_OPTIONS', None) or {}).items()]
    extra = []
    choices = getattr(cls, 'CHOICES', None) or {}
    if choices:
        extra.append('type keys: ' + ', '.join(f'train.{k} ({c.registry.kind}: {c.prefix}<key>)'
                                              for k, c in choices.items()))
    if getattr(cls, 'HAS_NETD', False):
        extra.append('needs a netD section (a discriminator: netD.net_type)')
    restorer = getattr(cls, 'restorer_class', None)
    if restorer is not None:
        extra.append(f'evaluates with {restorer.__name__}: {summary_of(restorer)}')
    return Member('model', name, summary_of(cls), (Site('', 'model'),), tuple(keys + path + val), (), tuple(extra),
                  class_names(cls))


def dataset_member(name: str, aliases: Tuple[str, ...], cls: Any) -> Member:
    """A dataset type as a member: its own keys (the loader's are listed once) and those it inherits."""
    keys = tuple(key_info(k, spec, DATASET_KEY_HELP.get(k, '')) for k, spec in cls.OPTIONS.items()
                 if k not in LOADER_OPTIONS)
    inherited = [k for k in INHERITED if k in cls.OPTIONS]
    extra = (f'inherits from the top level when not given: {", ".join(inherited)}',) if inherited else ()
    return Member('dataset', name, summary_of(cls), (Site('datasets.<phase>', 'dataset_type'),), keys, aliases, extra,
                  class_names(cls))


def simple_members(registry: Registry, kind: str, site: Site) -> List[Member]:
    """The members of a registry whose members read no keys (initialisers, demo data generators)."""
    return [Member(kind, name, summary_of(obj), (site,), (), aliases, classes=class_names(obj))
            for name, aliases, obj in grouped(registry)]


def catalog() -> Catalog:
    """The whole catalog (imports every member module; builds nothing)."""
    sections = {sec: [key_info(k, spec) for k, spec in SCHEMA[sec].items()] for sec in ('path', 'train', 'val',
                                                                                         'logging')}
    top = [key_info(k, spec) for k, spec in SCHEMA.items() if not isinstance(spec, dict)]
    sites = choice_sites()
    members: Dict[str, List[Member]] = {
        'model': [model_member(n) for n in MODELS.names()],
        'network': [network_member(n, a, c) for n, a, c in grouped(NETWORKS)],
        'dataset': [dataset_member(n, a, c) for n, a, c in grouped(DATASETS)],
        'loss': chosen_members(LOSSES, 'loss', sites),
        'optimizer': chosen_members(OPTIMIZERS, 'optimizer', sites),
        'scheduler': chosen_members(SCHEDULERS, 'scheduler', sites),
        'sharpness-aware method': chosen_members(SAM_METHODS, 'sharpness-aware method', sites),
        'metric': chosen_members(METRICS, 'metric', sites),
        'weight initialiser': simple_members(WEIGHT_INITS, 'weight initialiser', Site('netG', 'init_type')),
        'BatchNorm initialiser': simple_members(BN_INITS, 'BatchNorm initialiser', Site('netG', 'init_bn_type')),
        'demo data generator': simple_members(DEMO_DATA, 'demo data generator',
                                              Site('datasets.<phase>', 'generate_demo')),
    }
    return Catalog(top=top, sections=sections, loader=[key_info(k, s) for k, s in LOADER_OPTIONS.items()],
                   network_common=[key_info(k, s) for k, s in INIT_OPTIONS.items()], members=members,
                   choice_sites=sites)


# --- --describe --------------------------------------------------------------------------------------------

def loose(name: str) -> str:
    """A name compared loosely: lower case, letters and digits only, without "dataset" (BasicSR calls
    `realesrgan` RealESRGANDataset; our class is DatasetRealESRGAN)."""
    return re.sub(r'[^a-z0-9]', '', name.lower()).replace('dataset', '')


def find(cat: Catalog, name: str) -> List[Member]:
    """The members called `name`: a registered name or alias; else the same ignoring case; else loosely
    (`loose`), also by the class's name."""
    def names(m: Member) -> Tuple[str, ...]:
        return (m.name, *m.aliases)
    for same in (lambda m: name in names(m), lambda m: name.lower() in [n.lower() for n in names(m)],
                 lambda m: bool(loose(name)) and loose(name) in [loose(n) for n in (*names(m), *m.classes)]):
        found = [m for m in cat.all_members() if same(m)]
        if found:
            return found
    return []


def every_name(cat: Catalog) -> List[str]:
    """Every name --describe takes, for its did-you-mean."""
    return sorted({n for m in cat.all_members() for n in (m.name, *m.aliases)})


# what `--describe` takes for a kind of member (each registry's `listing`, named in its unknown-name message)
KIND_WORDS = ['network', 'model', 'dataset', 'loss', 'optimizer', 'scheduler', 'sharpness-aware', 'metric', 'init',
              'demo']


def kinds_named(cat: Catalog, word: str) -> List[str]:
    """The kinds of member a word names, singular or plural: "network", "losses", "dataset", "init"
    (the weight and BatchNorm initialisers), "demo" (the demo data generators)."""
    w = word.lower()
    forms = {w, w[:-1] if w.endswith('s') else w, w[:-2] if w.endswith('es') else w}
    if forms & {'init', 'initializer'}:
        forms.add('initialiser')
    return [k for k in cat.members if forms & set(k.lower().split())]


def kind_text(cat: Catalog, kinds: Sequence[str]) -> str:
    """What `--describe <kind>` prints: every member of those kinds, a line each (name, aliases, summary)."""
    lines = []
    for kind in kinds:
        members = sorted(cat.members[kind], key=lambda m: m.name.lower())
        sites = dict.fromkeys(s.words() for m in members for s in m.sites)
        plural = f'{kind}es' if kind.endswith('s') else f'{kind}s'
        lines.append(f'{len(members)} {plural}{" (chosen by " + "; ".join(sites) + ")" if sites else ""}:')
        named = [(m, m.name + (f' (also: {", ".join(m.aliases)})' if m.aliases else '')) for m in members]
        width = min(max(len(n) for _, n in named), 28)
        for m, n in named:
            summary = m.summary or NO_HELP
            lines.append(f'  {n.ljust(width)}  {summary if len(summary) <= 80 else summary[:77] + "..."}')
    return '\n'.join(lines + ['--describe <name> shows the keys of one of them'])


def describe(name: str, cat: Optional[Catalog] = None) -> str:
    """What `--describe <name>` prints: per member of that name, where it is chosen and the keys it reads
    (type, default, allowed values, meaning); for a kind ("networks", "loss", ...) the list of its members.
    A UserError with a did-you-mean for an unknown name."""
    cat = cat or catalog()
    if name == AUTO:
        return auto_text()
    found = find(cat, name)
    kinds = kinds_named(cat, name)
    if kinds and not any(m.name == name or name in m.aliases for m in found):
        return kind_text(cat, kinds)
    if not found:
        words = KIND_WORDS
        raise UserError(f'--describe: unknown name "{name}"{did_you_mean(name, every_name(cat) + words)}; '
                        f'a kind ({", ".join(words)}) lists its names; docs/options.md lists every name')
    return '\n\n'.join(member_text(m) for m in found)


def auto_text() -> str:
    """What --describe says of netG.net_type "auto", which is resolved before validation and not registered."""
    return ('network "auto" (netG.net_type): the architecture and its keys are read from the checkpoint in '
            'path.pretrained_netG (spandrel detects it) and replace "auto" before the options are checked.\n'
            '  only netG.init_type, init_bn_type and init_gain may accompany it; path.pretrained_netG is required')


def member_text(m: Member) -> str:
    """What --describe prints for one member: where it is chosen and the table of its keys."""
    also = f' (also: {", ".join(m.aliases)})' if m.aliases else ''
    lines = [f'{m.kind} "{m.name}"{also}: {m.summary or NO_HELP}',
             f'  chosen by: {"; ".join(s.words() for s in m.sites)}']
    lines += [f'  {line}' for line in m.extra]
    for site in m.sites[:1]:
        keys = m.written(site)
        if not keys:
            if not any(e.startswith('keys unknown') for e in m.extra):
                lines.append('  keys: none of its own')
            continue
        where = site.section if m.kind != 'model' else 'train'
        prefix = f' (written {site.prefix}<key>)' if site.prefix else ''
        lines.append(f'  keys in {where}{prefix}:')
        lines += key_table(keys)
        others = [s for s in m.sites[1:] if s.prefix != site.prefix]
        for s in others:
            lines.append(f'  at {s.words()} the same keys are written {s.prefix}<key>')
    if m.kind == 'network':
        own = {x.key for x in m.keys}
        lines.append(f'  netG also takes {", ".join(INIT_OPTIONS)}; KAIR\'s shared keys it does not take are '
                     f'accepted and ignored: {", ".join(k for k in KAIR_SHARED_KEYS if k not in own)}')
    if m.kind == 'dataset':
        lines.append(f'  every datasets.<phase> section also takes the loader keys: {", ".join(LOADER_OPTIONS)}')
    return '\n'.join(lines)


def key_table(keys: Sequence[KeyInfo]) -> List[str]:
    """--describe's table of keys: key, type, default, meaning with what it allows."""
    rows = [(k.key, k.type_words(), k.default_words(), meaning(k)) for k in keys]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    widths = [min(w, cap) for w, cap in zip(widths, (34, 22, 24))]
    return ['    ' + '  '.join(c.ljust(w) for c, w in zip(r[:3], widths)) + '  ' + r[3] for r in rows]


def meaning(k: KeyInfo) -> str:
    """A key's help text followed by what its check allows, in brackets."""
    if k.ignored:
        return 'accepted and ignored (KAIR writes it; not read here)'
    text = k.help or NO_HELP
    allowed = k.allowed_words()
    return f'{text} [{allowed}]' if allowed else text
