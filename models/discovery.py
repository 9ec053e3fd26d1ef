"""Which network a weights file holds, from the file alone: what `main_test.py --weights W` runs without `--opt`.

Tried in this order, the first that applies wins (and is named in the log):
  1. a file in a run's `models/` folder (or the run folder itself: its newest checkpoint): the options the run
     saved in `<run>/options/` (the newest file), so model, netG, scale, channels and `val` are the training's;
  2. a `.safetensors` file of `scripts/export.py`: its metadata `net_type` and `netG` (model `plain`; weights
     saved after `merge_bn` folded BatchNorm load too);
  3. any other file: `netG.net_type: "auto"` (models/networks/auto.py: spandrel recognises the architecture
     from the state_dict, and the equivalent netG of ours is built).
Weights none of them explains are one UserError saying what each found. What is returned is an option file's
data (not yet validated: `option_rules.read_weights_options` validates it as any option file).
"""
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from models.networks.auto import resolve_auto
from utils.checkpoint import is_safetensors, load, newest_weights, safetensors_metadata, unwrap_params
from utils.errors import UserError
from utils.options import NETWORK_SCALE_KEYS, parse_json_file, saved_run_data

SAVED_OPTIONS = re.compile(r'_(\d{6}_\d{6})\.json$')  # <name>_<yymmdd_hhmmss>.json, as main_train saves them


@dataclass
class Discovered:
    """An option file's data for the weights, where it came from (one log line), the weights file itself, what
    errors in the data name (`source`), and the run folder the weights lie in."""
    data: Dict[str, Any]
    note: str
    weights: str
    source: str
    run_folder: Optional[str] = None


def run_folder_of(weights: str) -> Optional[str]:
    """The run folder a weights file lies in (`<run>/models/<file>`), or that `weights` is, when it has saved
    options (`<run>/options/*.json`); else None."""
    path = os.path.abspath(weights)
    run = path if os.path.isdir(path) else os.path.dirname(os.path.dirname(path))
    if not os.path.isdir(path) and os.path.basename(os.path.dirname(path)) != 'models':
        return None
    return run if saved_options(run) else None


def saved_options(run: str) -> List[str]:
    """The option files a run saved, oldest first (by the time in their names; a resumed run saves one more)."""
    folder = os.path.join(run, 'options')
    try:
        names = [n for n in os.listdir(folder) if n.endswith('.json')]
    except OSError:
        return []
    key = lambda n: (SAVED_OPTIONS.search(n).group(1) if SAVED_OPTIONS.search(n) else '', n)
    return [os.path.join(folder, n) for n in sorted(names, key=key)]


def run_weights(folder: str, with_options: bool) -> str:
    """A run folder given as `--weights`: its newest checkpoint (EMA weights when present). `with_options`: the
    network is to be found from the options the run saved, so it must have them."""
    run = os.path.abspath(folder)
    if with_options and run_folder_of(run) is None:
        raise UserError(f'--weights {folder}: a folder, but not a run folder (no options/*.json and models/ in '
                        f'it); give a weights file')
    if not os.path.isdir(os.path.join(run, 'models')):
        raise UserError(f'--weights {folder}: a folder, but not a run folder (no models/ in it); give a weights file '
                        f'or a run folder')
    return newest_weights(os.path.join(run, 'models'))


def discover(weights: str) -> Discovered:
    """The network of `weights` (see the module docstring)."""
    if os.path.isdir(weights):
        weights = run_weights(weights, with_options=True)
    elif not os.path.isfile(weights):
        raise UserError(f'--weights {weights}: no such file')
    tried = []
    run = run_folder_of(weights)
    if run is not None:
        saved = saved_options(run)[-1]
        return Discovered(saved_run_data(parse_json_file(saved), run), f'the options its run saved, {saved}',
                          weights, saved, run)
    parent = os.path.dirname(os.path.abspath(weights))
    tried.append('not in a run folder (<run>/models/ beside <run>/options/)' if os.path.basename(parent) != 'models'
                 else f'{os.path.dirname(parent)} has no options/*.json')
    if is_safetensors(weights):
        meta = safetensors_metadata(weights)
        if 'net_type' in meta and 'netG' in meta:
            netG = {**json.loads(meta['netG']), 'net_type': meta['net_type']}
            return Discovered(network_data(weights, netG, merge_bn=True),
                              f'the metadata scripts/export.py wrote into it: net_type {meta["net_type"]}', weights,
                              f'--weights {weights}')
        tried.append('a .safetensors file without the net_type/netG metadata scripts/export.py writes')
    else:
        tried.append('not a .safetensors file of scripts/export.py')
    try:
        netG, note = resolve_auto({'net_type': 'auto'}, weights)
    except UserError as e:
        text = str(e)
        for prefix in ('path.pretrained_netG: ', f'{weights}: '):
            text = text[len(prefix):] if text.startswith(prefix) else text
        for advice in ('; give netG.net_type', '; write its netG'):  # advice for option files, not for --weights
            text = text.split(advice)[0]
        tried.append(f'net_type "auto": {text}')
        raise UserError(f'--weights {weights}: no network found for it: {"; ".join(tried)}; give --opt with the '
                        f'option file it was trained with') from None
    return Discovered(network_data(weights, netG), note.replace('netG: net_type "auto": ', 'net_type "auto": '),
                      weights, f'--weights {weights}')


def network_data(weights: str, netG: Dict[str, Any], merge_bn: bool = False) -> Dict[str, Any]:
    """Option data for a bare network: model `plain`, the network's factor as the top-level `scale`, and 1 or 3
    `n_channels` as its first convolution takes (what the inputs are read as)."""
    scale = next((netG[k] for k in NETWORK_SCALE_KEYS if k in netG and isinstance(netG[k], int)), 1)
    state = unwrap_params(load(weights), 'params')
    first = next((t for t in state.values() if getattr(t, 'dim', lambda: 0)() == 4), None)
    channels = 1 if first is not None and first.shape[1] == 1 else 3
    name = re.sub(r'[^A-Za-z0-9_.-]', '_', os.path.splitext(os.path.basename(weights))[0]) or 'weights'
    return {'task': name, 'model': 'plain', 'scale': scale, 'n_channels': channels, 'merge_bn': merge_bn,
            'netG': netG}
