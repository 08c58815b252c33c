"""Stand-ins for the host agent's tests."""

import json

from rocegen.host import cli


def refusing_agent(monkeypatch, reply):
    """``rocegen-host``'s agent process replaced by a stand-in that answers ``reply`` (a dict:
    the agent's one JSON line) and ends with status 1. Returns the list the stand-in appends
    the configuration of each start to."""
    started = []

    class Proc:
        def __init__(self, argv, **kw):
            started.append(json.loads(argv[argv.index("--config") + 1]))
            self.stdout = self
            self.returncode = 1

        def readline(self):
            return json.dumps(reply).encode() + b"\n"

        def close(self):
            pass

        def wait(self):
            return 1

    monkeypatch.setattr(cli.subprocess, "Popen", Proc)
    return started
