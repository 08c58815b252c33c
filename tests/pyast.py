"""Python sources parsed for the tests that read the repository's code (layers, function
length, opcode tables)."""

import ast
import pickle
import subprocess
import sys

_FRESH = ("import ast, pickle, sys; "
          "sys.stdout.buffer.write(pickle.dumps(ast.parse(sys.stdin.read(), sys.argv[1])))")


def parse(text, filename="<unknown>"):
    """``ast.parse(text, filename)``. CPython 3.11 before 3.11.8 can fail a parse with
    ``SystemError: AST constructor recursion depth mismatch`` when an earlier parse in the
    same process failed half way (python/cpython#106905): such a parse is done again in a
    fresh interpreter."""
    try:
        return ast.parse(text, filename)
    except SystemError as e:
        if "recursion depth mismatch" not in str(e):
            raise
    out = subprocess.run([sys.executable, "-c", _FRESH, filename], input=text.encode(),
                         capture_output=True, check=True)
    return pickle.loads(out.stdout)
