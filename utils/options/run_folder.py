"""The run folder `<path.root>/<task>` and the folders under it (KAIR's layout), checked before anything anywhere
is written: only `os.stat`/`os.lstat` of path.root, its parents and the run folder; nothing is created here."""
import json
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from utils.options.messages import located, options_error

DERIVED_PATH_KEYS = ('task', 'models', 'images', 'options', 'tb_logger')  # what derive_paths adds under `path`


def _run_dir_problem(root: str, task: str) -> Optional[Tuple[str, str]]:
    """(key, message) when `<root>/<task>` is not a folder strictly inside `root` that can be created.

    Only looks: `os.stat`/`os.lstat` on `root`, its parents and the run folder; nothing is created.
    """
    root_abs = os.path.abspath(root)
    run_dir = os.path.normpath(os.path.join(root_abs, task))
    if os.path.commonpath([root_abs, run_dir]) != root_abs or run_dir == root_abs:
        return 'task', f'{json.dumps(task)}: the run folder {run_dir} is not inside path.root {root_abs}'
    try:
        existing = root_abs
        while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if os.path.lexists(existing) and not os.path.isdir(existing):
            kind = ('is a file, not a folder' if os.path.isfile(existing) else
                    'is a broken symbolic link' if os.path.islink(existing) else 'is not a folder')
            where = '' if existing == root_abs else f' cannot be created: {existing}'
            return 'path.root', f'{root}{where} {kind}'
        real_root = os.path.realpath(root_abs)
        real_run = os.path.realpath(run_dir)
        if os.path.commonpath([real_root, real_run]) != real_root or real_run == real_root:
            return 'task', (f'the run folder {run_dir} leads to {real_run} (a symbolic link?), '
                            f'which is not inside path.root {real_root}')
        if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
            return 'task', f'the run folder {run_dir} exists and is not a folder'
    except (OSError, ValueError) as e:
        return 'path.root', f'{root} cannot be checked: {getattr(e, "strerror", None) or e}'
    return None


def derive_paths(opt: Dict[str, Any], source: str = '<options>', overridden: Optional[Mapping[str, str]] = None) -> None:
    """Add the run folders (KAIR layout) under `path`: <root>/<task>/{models,images,options,tb_logger}.

    The run folder must lie strictly inside `path.root` (also after resolving symbolic links) and
    `path.root` must be a folder or creatable as one: an OptionsError otherwise, before any write.
    """
    p = opt['path']
    problem = _run_dir_problem(p['root'], opt['task'])
    if problem:
        raise options_error(f'{located(problem[0], source, overridden or {})}: {problem[1]}')
    task_dir = os.path.join(p['root'], opt['task'])
    p.update(task=task_dir, models=os.path.join(task_dir, 'models'),
             images=os.path.join(task_dir, 'images'), options=os.path.join(task_dir, 'options'),
             tb_logger=os.path.join(task_dir, 'tb_logger'))
