"""What a run keeps of its options: the resolved options as JSON (secrets redacted, internal keys dropped) in
<run>/options/, and those saved options read back as an option file's data, for a resume or main_test."""
import json
import os
from typing import Any, Dict

from utils.options.messages import redact
from utils.options.run_folder import DERIVED_PATH_KEYS


def dumps(opt: Dict[str, Any]) -> str:
    """The resolved options as JSON text, secrets redacted, internal keys dropped."""
    def clean(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: clean(v) for k, v in d.items() if not k.startswith('_')}
        return d
    return json.dumps(redact(clean(opt)), indent=2, sort_keys=False, default=str)


def saved_run_data(saved: Dict[str, Any], run_folder: str) -> Dict[str, Any]:
    """The options a run saved (`dumps` into <run>/options/) as an option file's data again, placed at the run
    folder where it lies now (path.root its parent, task its name): what derive_paths, validation and the
    loader added (opt_path, the run folders, each dataset's phase) is taken out, so it validates as written."""
    data = {k: v for k, v in saved.items() if k != 'opt_path'}
    data['path'] = {k: v for k, v in (saved.get('path') or {}).items() if k not in DERIVED_PATH_KEYS}
    run_folder = os.path.abspath(run_folder)
    data['path']['root'], data['task'] = os.path.dirname(run_folder), os.path.basename(run_folder)
    if isinstance(saved.get('datasets'), dict):
        data['datasets'] = {phase: {k: v for k, v in section.items() if k != 'phase'} if isinstance(section, dict)
                            else section for phase, section in saved['datasets'].items()}
    return data
