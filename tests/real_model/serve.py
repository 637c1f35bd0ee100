"""Start llama-cpp-python's OpenAI-compatible server for the Gemma 3 270M GGUF.

Runs under the Python of the venv where ``llama-cpp-python[server]`` is installed (not
toolloop's: ``tests/real_model/run.py`` makes that venv) and uses only the standard library
and ``llama_cpp``::

    .venv-model/bin/python tests/real_model/serve.py --model gemma.gguf --port 8765

The server gets the settings this model needs on this kind of machine:

- ``--chat_format gemma``: the GGUF carries no chat template; without it the server picks
  another format and answers with empty content;
- ``--n_threads 1``: on a busy 2-core machine two threads collapse to ~1 token/s;
- ``--n_ctx 4096``, a model alias (``gemma-3-270m``), 127.0.0.1;
- ``--interrupt_requests false``: a new request waits for the one in progress instead of
  cutting it off, so the suite can tell that closing a stream early really stopped the
  generation (``--interrupt-requests`` keeps the server's default);
- ``use_extra_bufts = False`` in llama.cpp's model params: on CPUs that advertise AMX the
  server otherwise segfaults on its first request, inside the AMX matrix multiply (weights
  repacked into "extra buffer types"). ``llama_cpp.Llama`` builds its model params from
  ``llama_cpp.llama_cpp.llama_model_default_params()``, looked up on that module at call
  time, so wrapping that function before the server's ``main()`` loads the model changes the
  default; nothing in site-packages is edited (``--no-amx-workaround`` keeps llama.cpp's
  default).

Arguments after ``--`` go to the server as they are.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

DEFAULT_ALIAS = "gemma-3-270m"
DEFAULT_PORT = 8765


def disable_extra_bufts() -> bool:
    """Make every model load with ``use_extra_bufts = False`` (no AMX weight repacking).

    Returns whether the workaround is in place.
    """
    lib: Any = importlib.import_module("llama_cpp.llama_cpp")
    original = lib.llama_model_default_params
    if getattr(original, "toolloop_patched", False):
        return True
    fields = {name for name, *_ in lib.llama_model_params._fields_}
    if "use_extra_bufts" not in fields:
        # another llama.cpp: say so, rather than set an attribute that ctypes would ignore
        print(
            "serve.py: this llama-cpp-python's llama_model_params has no use_extra_bufts; "
            "the AMX workaround is not applied",
            file=sys.stderr,
            flush=True,
        )
        return False

    def llama_model_default_params() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    setattr(llama_model_default_params, "toolloop_patched", True)  # noqa: B010
    lib.llama_model_default_params = llama_model_default_params
    return True


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        description="Start llama-cpp-python's server for the Gemma 3 270M GGUF "
        "(see the module's docstring)."
    )
    parser.add_argument("--model", required=True, help="path of the .gguf file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--alias", default=DEFAULT_ALIAS, help="the model's name in the API")
    parser.add_argument("--n_ctx", type=int, default=4096)
    parser.add_argument("--n_threads", type=int, default=1)
    parser.add_argument("--chat_format", default="gemma")
    parser.add_argument(
        "--interrupt-requests",
        action="store_true",
        help="let a new request cut off the one in progress (the server's default)",
    )
    parser.add_argument(
        "--no-amx-workaround",
        action="store_true",
        help="keep llama.cpp's use_extra_bufts default (segfaults on CPUs with AMX)",
    )
    opts = parser.parse_args(argv)
    if not os.path.isfile(opts.model):
        parser.error(f"no model file at {opts.model}")
    return opts, extra


def main(argv: list[str] | None = None) -> None:
    opts, extra = parse_args(sys.argv[1:] if argv is None else argv)
    if not opts.no_amx_workaround:
        disable_extra_bufts()
    # the server's main() lets these variables override its command line
    for name in ("HOST", "PORT", "CONFIG_FILE"):
        os.environ.pop(name, None)
    sys.argv = [
        "llama_cpp.server",
        "--model",
        opts.model,
        "--model_alias",
        opts.alias,
        "--host",
        opts.host,
        "--port",
        str(opts.port),
        "--n_ctx",
        str(opts.n_ctx),
        "--n_threads",
        str(opts.n_threads),
        "--chat_format",
        opts.chat_format,
        "--interrupt_requests",
        "true" if opts.interrupt_requests else "false",
        *extra,
    ]
    print("serve.py: python -m", " ".join(sys.argv), flush=True)
    server: Any = importlib.import_module("llama_cpp.server.__main__")
    server.main()


if __name__ == "__main__":
    main()
