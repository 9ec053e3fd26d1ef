"""One section that names a member by `type:` (a network, dataset, loss, optimizer, scheduler), translated through
the member's own `Foreign` declaration (utils/options/foreign.py)."""
from typing import Any, Collection, Dict, List, Mapping, Optional

from utils.options.foreign import Foreign, Only, Refusal, Vocabulary, first, lookup, names_of
from utils.options.readers.basicsr.context import Context, shown
from utils.options.readers.yaml_file import KeyPath
from utils.options.values import show
from utils.suggest import did_you_mean

# What each kind is called in messages, and the --describe word that lists this project's members of it.
KINDS = {'network': ('network', 'network'), 'discriminator': ('discriminator', 'network'),
         'dataset': ('dataset type', 'dataset'), 'loss': ('loss', 'loss'), 'optimizer': ('optimizer', 'optimizer'),
         'scheduler': ('scheduler', 'scheduler'), 'model': ('model', 'model'), 'metric': ('metric', 'metric')}


def declaration(ctx: Context, vocabulary: Vocabulary, kind: str, keys: KeyPath, section: Mapping[str, Any],
                name_key: str = 'type') -> Foreign:
    """The member declaration `section[name_key]` names for this file's trainer, else one line naming it and what
    is near."""
    if name_key not in section:
        raise ctx.refuse(keys + (name_key,), f'required key is missing (the {KINDS[kind][0]} to build)')
    name = section[name_key]
    if not isinstance(name, str):
        raise ctx.refuse(keys + (name_key,), 'expected a name', name)
    found = lookup(vocabulary, kind, name, ctx.trainer)
    if not found:
        what, listing = KINDS[kind]
        known = names_of(vocabulary, kind, ctx.trainer)
        raise ctx.refuse(keys + (name_key,), f'no {what} "{name}" here{did_you_mean(name, known)}; the {what}s '
                         f'read from {ctx.trainer} files are {_listed(known)} (docs/option_files.md); '
                         f'--describe {listing} lists this project\'s own', show_value=False)
    chosen = first(found, section)
    if chosen is None:
        tells = sorted({k for f in found for k in f.requires})
        given = ', '.join(f'{k}: {show(section.get(k, found[0].defaults.get(k)))}' for k in tells)
        offered = '; '.join(', '.join(f'{k}: {show(v)}' for k, v in f.requires.items()) for f in found)
        raise ctx.refuse(keys + (name_key,), f'"{name}" with {given} is not supported here (only {offered})',
                         show_value=False)
    return chosen


def _listed(names: List[str], most: int = 12) -> str:
    shown_names = ', '.join(names[:most])
    return shown_names + (f', ... ({len(names)} in all)' if len(names) > most else '') if names else 'none'


def apply(ctx: Context, f: Foreign, keys: KeyPath, section: Mapping[str, Any], target: str, prefix: str = '',
          skip: Collection[str] = ('type',)) -> Dict[str, Any]:
    """Put the member keys of their `section` (at `keys`) into our `target` section as `<prefix><our key>`, by the
    declaration `f`; returns {our unprefixed key: value} of what was put. `skip`: their keys handled elsewhere."""
    given = {k: v for k, v in section.items() if k not in skip}
    put: Dict[str, Any] = {}
    for their, default in f.defaults.items():
        if their not in given and their not in f.requires and their not in skip:
            ours = f.keys.get(their, their)
            ctx.put(_ours(target, prefix, ours), default, keys + ('type',), f'{f.trainer}\'s default for {f.name}')
            put[ours] = default
    for their, value in given.items():
        here = keys + (their,)
        if their in f.requires:
            continue
        if their in f.refused:
            raise ctx.refuse(here, f.refused[their], value)
        if their in f.unneeded:
            only = f.unneeded[their]
            only = only if isinstance(only, Only) else Only(only)
            if not only.any and value not in only.values:
                allowed = ' or '.join(show(v) for v in only.values)
                raise ctx.refuse(here, f'only {allowed} is supported here ({f.name}){": " + only.why if only.why else ""}',
                                 value)
            ctx.unneeded(here, only.why or f'{show(value)}, what this project does')
            continue
        if their in f.convert:
            try:
                value = f.convert[their](value)
            except Refusal as e:
                raise ctx.refuse(here, str(e), section[their]) from None
        ours = f.keys.get(their, their if f.passthrough else None)
        if ours is None:
            known = sorted({*f.keys, *f.requires, *f.unneeded, *f.refused, *f.convert})
            raise ctx.unknown(here, known, f'{f.name} takes {", ".join(known) or "no keys"}')
        ctx.put(_ours(target, prefix, ours), value, here)
        put[ours] = value
    for their, ours in f.keys.items():
        ctx.spell(_ours(target, prefix, ours), keys + (their,))
    if '.' in target or target in ('netG', 'netD'):  # a section of its own (train's keys come from many)
        ctx.spell(target, keys)
    if f.note:
        ctx.note(f'{shown(keys)}: {f.name}: {f.note}')
    return put


def _ours(target: str, prefix: str, ours: str) -> str:
    """Our dotted key of a member key: `<target>.<prefix><key>`, or the whole key after "/" (a key their section
    holds that is another section's here: `/val.padding`)."""
    return ours[1:] if ours.startswith('/') else f'{target}.{prefix}{ours}'


def member(ctx: Context, vocabulary: Vocabulary, kind: str, keys: KeyPath, section: Any, target: str, type_key: str,
           prefix: str = '', skip: Collection[str] = ('type',)) -> Foreign:
    """Translate one member section: its name into our `type_key`, its keys into `target` (see `apply`)."""
    section = ctx.section(keys, section)
    f = declaration(ctx, vocabulary, kind, keys, section)
    ctx.put(type_key, f.ours, keys + ('type',))
    apply(ctx, f, keys, section, target, prefix, skip)
    return f


def optional_member(ctx: Context, vocabulary: Vocabulary, kind: str, keys: KeyPath, section: Any) -> Optional[Foreign]:
    """The declaration a section names, or None when it names none (for choosing a model from its members)."""
    if not isinstance(section, dict) or not isinstance(section.get('type'), str):
        return None
    return first(lookup(vocabulary, kind, section['type'], ctx.trainer), section)
