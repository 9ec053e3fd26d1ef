"""What is wrong with a path given where a folder of data belongs, said in the words a user needs."""
import os
from typing import Optional


def folder_problem(path: str, what: str = 'folder') -> Optional[str]:
    """Why `path` is not a folder to read (`what`: "folder", "lmdb folder"): missing, a file, a broken link;
    None when it is one. A file where a folder belongs is named as such, not as a folder not found."""
    if os.path.isdir(path):
        return None
    if os.path.isfile(path):
        return f'{path} is a file, not a {what}; give the {what} that holds the data'
    if os.path.islink(path):
        return f'{path} is a broken symbolic link, not a {what}'
    return f'{what} not found: {path}'
