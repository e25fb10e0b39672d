"""``python -m contrastive_rlvr.compare COMMAND ...``: a child process of ``compare``
running one worker command (see :func:`.launch.child_main`)."""

import sys

from .launch import child_main

if __name__ == "__main__":
    child_main(sys.argv[1:])
