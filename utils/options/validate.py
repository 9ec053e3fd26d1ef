"""`validate`: a parsed option dict checked and completed, in the order a reader of the file would check it
(the top level, the loop's and the model's sections, netD, netG, the datasets, the names), so that the first
mistake is the one reported.

Unknown keys are errors with a did-you-mean, so a typo never silently falls back to a default. The result is
a plain dict with every key present: a key that does not exist raises KeyError instead of returning None.
"""
from typing import Any, Dict, Mapping, Optional, Set, Tuple

from utils.options.datasets import validate_datasets
from utils.options.rules import Rules
from utils.options.schema import (DYNAMIC_SECTIONS, GIVEN_INHERITED, NETWORK_SCALE_KEYS, SCHEMA, SCHEMA_POINTER,
                                  TOP_LEVEL_KEYS, missing_sections)
from utils.options.validator import Validator
from utils.options.values import check_values, show


def validate(data: Dict[str, Any], rules: Rules, source: str = '<options>',
             overridden: Optional[Mapping[str, str]] = None,
             spelling: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Check `data` and return a new dict with every key present (defaults filled). `overridden`: the `--set`
    arguments that gave keys of `data` (apply_overrides), named instead of `source` in their messages; `spelling`:
    how a file of another trainer names our keys (messages.located)."""
    v = Validator(source, overridden, spelling)
    data = _top_level(v, data)
    opt, extra = _loop_sections(v, data, rules)
    _discriminator(v, opt, data, rules, 'netD' in extra)
    scale_used = _generator(v, opt, data, rules)
    used_top_level, scale_in_data = validate_datasets(v, opt, data, rules)
    v.names(opt, rules.names)
    _note_unused_top_level(v, opt, used_top_level, scale_used or scale_in_data)
    opt['_notes'] = v.notes
    return opt


def _top_level(v: Validator, data: Dict[str, Any]) -> Dict[str, Any]:
    """`data` without the editor's `$schema` pointer, after checking every value's numbers and nesting and that
    each top-level key is one the options have."""
    bad = check_values(data)
    if bad:
        v.fail(*bad)
    if SCHEMA_POINTER in data:
        if not isinstance(data[SCHEMA_POINTER], str):
            v.fail(SCHEMA_POINTER, f'expected a string (the path or URL of options/schema.json), got '
                                   f'{show(data[SCHEMA_POINTER])}')
        data = {k: value for k, value in data.items() if k != SCHEMA_POINTER}
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            v.unknown('', key, TOP_LEVEL_KEYS)
    return data


def _loop_sections(v: Validator, data: Dict[str, Any], rules: Rules) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the options of SCHEMA's sections with the model's keys joined to them, validated and completed; what the
    model adds (`Rules.model`)). The members the type keys choose bring their keys; then the cross-key checks of
    `Rules.checks` run."""
    static = {k: data[k] for k in data if k not in DYNAMIC_SECTIONS}
    extra: Dict[str, Any] = {}
    if rules.model is not None:  # the model's own keys join the sections (a GAN's D_*, F_*, netD)
        extra = v.named('model', data['model'] if 'model' in data else SCHEMA['model'].default, rules.model)
    schema = {**SCHEMA, **{sec: {**SCHEMA[sec], **keys} for sec, keys in extra.items()
                           if sec in ('train', 'path', 'val')}}
    choices = {sec: dict(c) for sec, c in rules.choices.items()}
    if extra.get('choices'):
        choices.setdefault('train', {}).update(extra['choices'])
    for sec, chosen in choices.items():
        if isinstance(static.get(sec, {}), dict):
            static[sec], schema[sec] = v.choices(static.get(sec, {}), schema[sec], chosen, f'{sec}.')
    opt = v.section(static, schema, '')
    opt['_missing'] = missing_sections(data)
    for check in rules.checks:
        problem = check(opt)
        if problem:
            v.fail(*problem)
    return opt, extra


def _discriminator(v: Validator, opt: Dict[str, Any], data: Dict[str, Any], rules: Rules, trains_one: bool) -> None:
    """`opt['netD']` when the model trains a discriminator (`trains_one`), which then needs a netD section; a netD
    section for a model without one is an error."""
    if trains_one:
        netD = data['netD'] if 'netD' in data else None
        if netD is not None and not isinstance(netD, dict):
            v.not_a_section('netD', netD)
        if not isinstance(netD, dict) or 'net_type' not in netD:
            v.fail('netD.net_type', f'required key is missing (model {opt["model"]} trains a discriminator)')
        opt['netD'] = v.section(netD, v.named('netD.net_type', netD['net_type'], rules.discriminator), 'netD.',
                                nested=False)
    elif 'netD' in data:
        v.fail('netD', f'model {opt["model"]} trains no discriminator (model "gan" does); remove netD')


def _generator(v: Validator, opt: Dict[str, Any], data: Dict[str, Any], rules: Rules) -> bool:
    """`opt['netG']`, its scale key inheriting the top-level `scale`; whether netG takes a scale."""
    netG = data.get('netG')
    if 'netG' in data and not isinstance(netG, dict):
        v.not_a_section('netG', netG)
    if not isinstance(netG, dict) or 'net_type' not in netG:
        v.fail('netG.net_type', 'required key is missing')
    schema = v.named('netG.net_type', netG['net_type'], rules.network)
    # KAIR gives SR networks the top-level scale; a contradiction is an error. Networks name their factor
    # differently (SwinIR `upscale`, PLKSR/SAFMN `upscaling_factor`, Omni-SR `up_scale`, Swift-SRGAN
    # `upscale_factor`, RRDBNet/MoESR/Real-CUGAN `scale`).
    scale_key = next((k for k in NETWORK_SCALE_KEYS if k in schema), None)
    if scale_key is not None:
        if scale_key not in netG:
            netG = {**netG, scale_key: opt['scale']}
        elif netG[scale_key] != opt['scale']:
            v.fail(f'netG.{scale_key}', f'{show(netG[scale_key])} differs from the top-level "scale": {opt["scale"]}; '
                   f'the datasets work at scale {opt["scale"]} (leave netG.{scale_key} out to inherit it)')
    opt['netG'] = v.section(netG, schema, 'netG.', nested=False)
    return scale_key is not None


def _note_unused_top_level(v: Validator, opt: Dict[str, Any], used: Set[str], scale_used: bool) -> None:
    """A note for each top-level key given for the sections that none of them takes (KAIR ignores it silently)."""
    unused = [k for k in GIVEN_INHERITED if opt[k] is not None and k not in used]
    if unused:
        v.notes.append(f'{", ".join(unused)}: no dataset section takes {"them" if len(unused) > 1 else "it"}; ignored')
    if opt['scale'] != 1 and not scale_used:
        v.notes.append(f'scale: {opt["scale"]}, but neither netG ({opt["netG"]["net_type"]}) nor a dataset section '
                       f'takes it; ignored')
