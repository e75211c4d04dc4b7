"""The test suite's machinery, each piece checking the version it was written for and
falling back to the plain way (slower, not broken) elsewhere:

- ``forkserver.py``: forks the tests' fairseq commands and scripts from a process that has
  imported torch and fairseq once (Python 3.11, fairseq 0.12.2 / 0.12.3);
- ``commands.py``: run_cli and run_script, through the fork server where it applies;
- ``run_together.py``: runs commands at once (the two gloo ranks of a distributed run);
- ``triton_interpreter.py``: a speed-up of Triton 3.9's CPU interpreter;
- ``ordering.py``: the order the tests start in.
"""
