"""The layers of torchvision's VGG19 `features` by the names BasicSR and traiNNer-redux give them (`conv1_1` = 0,
`relu1_1` = 1, ..., `conv5_4` = 34, `pool5` = 36): their perceptual losses choose layers by name, ours by index."""
from typing import List

VGG19_LAYER_NAMES: List[str] = []
for _block, _convs in enumerate((2, 2, 4, 4, 4), start=1):
    for _i in range(1, _convs + 1):
        VGG19_LAYER_NAMES += [f'conv{_block}_{_i}', f'relu{_block}_{_i}']
    VGG19_LAYER_NAMES.append(f'pool{_block}')


def vgg19_index(name: str) -> int:
    """The index of layer `name` in VGG19's `features`; ValueError for a name VGG19 does not have."""
    if name not in VGG19_LAYER_NAMES:
        raise ValueError(f'not a VGG19 layer ({VGG19_LAYER_NAMES[0]} ... {VGG19_LAYER_NAMES[-1]})')
    return VGG19_LAYER_NAMES.index(name)
