"""Stand-in for KFP's launcher-v2 (``/kfp-launcher/launch``), the emissary's direct child.

Mirrors kubeflow/pipelines at tag 2.17.0:

* backend/src/v2/driver/driver.go L320-337, L454-460: the main container's command
  is ``/kfp-launcher/launch … -- <user command>``: the launcher is the emissary's child.
* backend/src/v2/component/launcher_v2.go L699-717: with ``publish_logs == "true"``
  (the default: cmd/launcher-v2/main.go L49) the user command's stdout and stderr
  are one ``io.MultiWriter(os.Stdout, logFile)`` (getLogWriter, L632-653); Go's
  os/exec then gives the child a *pipe* and copies it in a goroutine. So the
  child's stdout is a pipe whose only reader is the launcher.
* ``command.Run()`` (L716): no other process management.
* No ``os/signal`` anywhere under backend/ (git grep at 2.17.0): Go's default action
  for SIGTERM ends the launcher at once. Python's default SIGTERM action is the
  same (SIG_DFL), so this stand-in installs no handler.

Usage: ``python kfp_launcher.py --log-file PATH -- COMMAND ...``
"""

import subprocess
import sys


def main(argv):
    assert argv[0] == "--log-file" and argv[2] == "--", argv
    log_path, cmd = argv[1], argv[3:]
    # command.Stdout = command.Stderr = writer: one pipe for both.
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with open(log_path, "ab") as log:
        out = sys.stdout.buffer
        while True:
            chunk = child.stdout.read1(65536)
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            log.write(chunk)
            log.flush()
    code = child.wait()
    # launcher_v2.go: Run's error ends the launcher with a failure; outputs would
    # be published on success (not modelled: the tests only look at preemptions).
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
