"""Every external weights file the project can read, in one list, and where each is looked for.

Nothing is ever downloaded: a run that needs one of these files and does not find it stops with one
line saying which file to put where and where to get it. The default folder is torch's hub cache
(`<torch hub dir>/checkpoints`), where torchvision and the `lpips` package would have downloaded
them, so a machine that ever used them has them already. Adding a file is one entry here.
"""
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, Optional

from utils.errors import UserError


@dataclass(frozen=True)
class WeightsFile:
    """One released weights file: its file name, where it is published, and its sha256 (the full digest,
    or the leading hex digits its publisher puts in the file name when that is all that is known)."""
    file: str
    url: str
    sha256: str
    what: str  # what reads it, for messages and the README's list
    licence: str


WEIGHTS: Dict[str, WeightsFile] = {
    'vgg19': WeightsFile('vgg19-dcbb9e9d.pth', 'https://download.pytorch.org/models/vgg19-dcbb9e9d.pth',
                         'dcbb9e9d', 'torchvision\'s ImageNet VGG19 (the perceptual loss, F_*)', 'BSD-3-Clause'),
}


def default_folder() -> str:
    """<torch hub dir>/checkpoints: torch.hub's download folder (TORCH_HOME, else ~/.cache/torch)."""
    import torch  # torch is heavy; this module is imported by the option checks too
    return os.path.join(torch.hub.get_dir(), 'checkpoints')


def default_path(name: str) -> str:
    """Where `name` (a key of WEIGHTS) is looked for when the options give no path."""
    return os.path.join(default_folder(), WEIGHTS[name].file)


def weights_path(name: str, given: Optional[str], where: str) -> str:
    """The existing file for `name`: `given` (an option's value) or the default path; else one line:
    `<where>: put file X at path Y (from URL)`."""
    w = WEIGHTS[name]
    path = given or default_path(name)
    if not os.path.isfile(path):
        raise UserError(f'{where}: {w.what}: weights not found; nothing is downloaded here: put file {w.file} '
                        f'at {path} (from {w.url}){"" if given else f", or set {where} to your copy"}')
    return path


def sha256_matches(name: str, path: str) -> bool:
    """Whether the file at `path` has WEIGHTS[name]'s digest (or digest prefix)."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest().startswith(WEIGHTS[name].sha256)
