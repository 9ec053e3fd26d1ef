"""The repository carries a licence (Apache-2.0, BasicSR's and traiNNer-redux's), and the README says which."""
import os

from tests.conftest import ROOT


def test_the_repository_is_apache_2_licensed_and_the_readme_says_so():
    with open(os.path.join(ROOT, 'LICENSE'), encoding='utf-8') as f:
        text = f.read()
    assert 'Apache License' in text and 'Version 2.0, January 2004' in text
    assert 'END OF TERMS AND CONDITIONS' in text and 'BasicSR' not in text  # the whole text, our own copyright line
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    assert 'Apache License, Version 2.0 ([LICENSE](LICENSE))' in readme
    assert 'non-commercial' in readme  # the notes on networks whose official code is non-commercial stay
