"""Option files: a file → validated plain dict with every key present.

The file is read once (readers/: JSON with comments), overrides from the command line are applied to the
parsed data (overrides.py), and the result is validated (validate.py) against the loop's schema (schema.py)
and against the rules of the layers above (`Rules`, rules.py: the network constructor's signature, the
dataset classes' `OPTIONS`, the registered names), which the entry point passes in: this package knows no
network, dataset or model. Each of those declares its keys with `Key` (keys.py) and the checks of
checks.py. Nothing here touches the environment or the file system beyond reading the file and looking at
`path.root` (run_folder.py: the run folder `<path.root>/<task>` is checked before anything anywhere is
written); saved.py writes the resolved options back as JSON, secrets redacted.

The names below are the package's public face: `from utils.options import Key, positive, validate`.
"""
from utils.options.checks import (above, at_least, betas, between, closed_unit, distinct_names, learning_rate,
                                  non_negative, one_of, only, open_unit, positive, positive_ints, unit_interval,
                                  up_to_one)
from utils.options.keys import IGNORED, REQUIRED, Check, Choice, Key, inferred_types, rule
from utils.options.load import load_options, options_from_data, with_test_sets
from utils.options.messages import REDACTED, redact, source_of
from utils.options.overrides import apply_overrides, parse_override
from utils.options.readers import parse_json_file, read_option_file, strip_json_comments
from utils.options.rules import Rules
from utils.options.run_folder import DERIVED_PATH_KEYS, derive_paths
from utils.options.saved import dumps, saved_run_data
from utils.options.schema import (DYNAMIC_SECTIONS, GIVEN_INHERITED, INHERITED, MAX_DIST_TIMEOUT, MAX_ITERATIONS,
                                  MAX_TASK_BYTES, NETWORK_SCALE_KEYS, SCHEMA, SCHEMA_POINTER, TEST_SECTION,
                                  all_test_sets, missing_sections, training_notes)
from utils.options.validate import validate
from utils.options.values import MAX_DEPTH

__all__ = [
    # declaring keys
    'Key', 'REQUIRED', 'IGNORED', 'Check', 'Choice', 'rule', 'inferred_types',
    # the check vocabulary
    'positive', 'non_negative', 'above', 'at_least', 'between', 'unit_interval', 'closed_unit', 'open_unit',
    'up_to_one', 'learning_rate', 'betas', 'one_of', 'only', 'positive_ints', 'distinct_names',
    # the loop's schema
    'SCHEMA', 'INHERITED', 'GIVEN_INHERITED', 'NETWORK_SCALE_KEYS', 'TEST_SECTION', 'DYNAMIC_SECTIONS',
    'SCHEMA_POINTER', 'MAX_DIST_TIMEOUT', 'MAX_ITERATIONS', 'MAX_TASK_BYTES', 'all_test_sets', 'missing_sections',
    'training_notes',
    # reading, overriding, validating, loading
    'parse_json_file', 'read_option_file', 'strip_json_comments', 'MAX_DEPTH', 'parse_override', 'apply_overrides',
    'source_of', 'Rules', 'validate', 'load_options', 'options_from_data', 'with_test_sets',
    # the run folder and the saved options
    'derive_paths', 'DERIVED_PATH_KEYS', 'dumps', 'redact', 'REDACTED', 'saved_run_data',
]
