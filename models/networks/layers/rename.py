"""A state_dict's names rewritten by a table of regular expressions: how a network declares the layout in which
another tool expects its weights (`spandrel_state_dict`, models/spandrel_file.py), without a second network."""
import re
from typing import Dict, Sequence, Tuple

import torch

Rules = Sequence[Tuple[str, str]]  # (pattern matched at the start of a name, re.sub replacement)


def renamed(state: Dict[str, torch.Tensor], rules: Rules) -> Dict[str, torch.Tensor]:
    """`state` with each name rewritten by the first rule whose pattern matches its start; a name no rule matches
    is kept."""
    out = {}
    for name, value in state.items():
        for pattern, replacement in rules:
            new, count = re.subn(f'^{pattern}', replacement, name)
            if count:
                name = new
                break
        out[name] = value
    return out
