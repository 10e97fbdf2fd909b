# funcd-python: the python3 runtime's worker (docs/worker-contract.md).
#
#   FUNCD_LISTEN=/path/worker.sock FUNCD_HANDLER=main.handler FUNCD_CODE_DIR=/code \
#       /usr/bin/python3 funcd-python.py
#
# The code lives in funcd_python_worker.py beside this file because Python
# compiles a script run as __main__ on every start (about 2 ms, a fifth of the
# start), while an imported module loads from its precompiled .pyc.
import sys

# sys.path[0] is this file's directory; the handler's code must not see it.
import funcd_python_worker
del sys.path[0]
funcd_python_worker.run()
