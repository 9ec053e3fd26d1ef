"""Run under 2 real processes: report which samples each rank trains on in two epochs.

Uses the framework's own detection, process group and train loader; rank 0 prints one JSON line
`SHARDS {"0": {"epoch0": [...], ...}, "1": {...}}` gathered from all ranks.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from torch.utils.data import Dataset  # noqa: E402

from data.loader import build_train_loader  # noqa: E402
from utils import dist  # noqa: E402


class Indices(Dataset):
    def __len__(self) -> int:
        return 22

    def __getitem__(self, key):
        index, seed = key
        return {'index': index, 'seed': seed}


def main() -> None:
    state = dist.detect()
    device = dist.init(state, timeout_s=60)
    loader_opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 1, 'dataloader_prefetch_factor': 2,
                  'dataloader_persistent_workers': True, 'dataloader_shuffle': True, '_where': 'datasets.train'}
    loader, sampler = build_train_loader(Indices(), loader_opt, state.world_size, state.rank, seed=11, device=device)
    mine = {}
    for epoch in range(2):
        sampler.set_epoch(epoch)
        mine[f'epoch{epoch}'] = [int(i) for b in loader for i in b['index']]
    everyone = dist.gather_objects(mine)
    if dist.is_main_process():
        print('SHARDS ' + json.dumps({str(r): v for r, v in enumerate(everyone)}), flush=True)
    dist.cleanup()


if __name__ == '__main__':
    main()
