"""The ``fastpe`` command line: one group, one module per command.

Commands parse their options, call the library and format the result; they do no numerics.
Heavy imports (numba, the kernels, the reference) happen inside the commands, so
``fastpe --help`` and ``fastpe --version`` stay fast, and a command's module is imported only
when that command runs (or the help lists them all): ``fastpe table`` does not compile and
load the others.

Exit status: 0 success; 1 an unexpected failure (e.g. the disk filled up, or memory ran
out) or, for ``check``, a value off by more than 1 ULP; 2 bad input (options, paths, sizes,
``$FASTPE_BACKEND``); 128 + the signal's number when a signal ends the command, as shells
report a death by that signal: 130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP.
Every error is a single ``Error: ...`` line on stderr (``-v`` adds the traceback of an
unexpected failure); a signal prints ``Aborted!``, followed by the signal's name for SIGTERM
and SIGHUP (which, unlike Ctrl-C, come from elsewhere: ``kill``, ``timeout``, a batch
scheduler, a closed terminal).

Signals.  For the whole run SIGTERM and SIGHUP raise an exception, as SIGINT does
(:func:`fastpe._io.atomic.signals_raise`), so every command's cleanup runs: no temporary or
partial file is left behind.  A signal the shell set to be ignored (``nohup``) stays ignored.
"""

from __future__ import annotations

import errno
import importlib
import sys
import threading

import click

from .._version import __version__
from .._io.atomic import Terminated, signals_raise
from .._backends.registry import BACKENDS
from . import options

__all__ = ["main", "COMMANDS"]

#: every command of the group, in one place: its name -> the module of this package that
#: defines it and the command's name there.  ``main`` registers these and no others, each
#: when it is first asked for (a run imports its own command's module, not the others;
#: ``--help`` and ``COMMANDS`` load them all)
_COMMAND_SOURCES: dict[str, tuple[str, str]] = {
    "table": ("table", "table"),
    "grid": ("grid", "grid"),
    "timestep": ("timestep", "timestep"),
    "alibi": ("alibi", "alibi"),
    "sandwich": ("sandwich", "sandwich"),
    "t5-buckets": ("t5", "t5_buckets"),
    "deberta": ("deberta", "deberta"),
    "shaw": ("deberta", "shaw"),
    "calendar": ("calendar", "calendar"),
    "fourier": ("fourier", "fourier"),
    "rope": ("rope", "rope"),
    "rope-axial": ("rope_axial", "rope_axial"),
    "plot": ("plot", "plot"),
    "info": ("info", "info"),
    "check": ("check", "check"),
}

_loading = threading.Lock()

#: exit status after Ctrl-C, as shells report a SIGINT death (128 + 2); SIGTERM and SIGHUP
#: give 128 + their number likewise (:attr:`fastpe._io.atomic.Terminated.exit_status`)
EXIT_INTERRUPTED = 130

# click >= 8.2 signals a bare group invocation with this usage error, whose message is the
# whole help text; older click prints the help and exits 0 by itself
_NoArgsIsHelp = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class FastpeGroup(click.Group):
    """A :class:`click.Group` whose errors are one line each.

    Click prints a usage block above a usage error; here every error is a single line on
    stderr, and any exception a command did not expect becomes one too (exit status 1)
    instead of a traceback.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMAND_SOURCES)  # as click lists a group's commands: by name

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _command(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and _command(click.utils.make_str(args[0])) is None:
            # not a command: click's error suggests close names from those registered, so all are
            for name in _COMMAND_SOURCES:
                _command(name)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # click's main handles a closed stdout quietly
                raise
            self._unexpected(ctx, exc, _one_line(exc))
        except MemoryError as exc:  # a size the checks let through, on a machine short of memory
            detail = f": {_one_line(exc)}" if str(exc) else ""
            raise click.ClickException(f"not enough memory{detail}") from exc  # exit status 1
        except Exception as exc:
            self._unexpected(ctx, exc, _one_line(f"{type(exc).__name__}: {exc}"))

    @staticmethod
    def _unexpected(ctx: click.Context, exc: Exception, message: str):
        verbosity = (ctx.obj or {}).get("verbosity", 0)
        if verbosity > 0:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        else:
            message += " (fastpe -v ... shows the traceback)"
        raise click.ClickException(message) from exc  # exit status 1

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        # held until the process exits: a second signal cannot cut the first one's cleanup short
        with signals_raise():
            try:
                rv = super().main(*args, standalone_mode=False, **kwargs)
            except _NoArgsIsHelp as exc:  # bare `fastpe`: the help, as click shows it
                exc.show()
                sys.exit(exc.exit_code)
            except click.ClickException as exc:
                click.echo(f"Error: {_one_line(exc.format_message())}", err=True)
                sys.exit(exc.exit_code)
            except click.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
                click.echo("Aborted!", err=True)
                sys.exit(EXIT_INTERRUPTED)
            except Terminated as exc:  # SIGTERM, SIGHUP: the cleanups have run on the way here
                click.echo(f"Aborted! ({exc.signal_name})", err=True)
                sys.exit(exc.exit_status)
            # a command returns None; --help, --version and ctx.exit(n) return an exit status
            sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


#: what each backend is, for the group's help (in the order the default tries them)
_BACKEND_NOTES = {"cython": "compiled", "numba": "compiled, parallel", "python": "the exact reference, slow"}

_HELP = f"""Exact positional encodings, fast: sinusoidal tables (every convention), RoPE
cos/sin caches (Hugging Face's scalings), ALiBi biases, T5 relative-position buckets, 2-D/3-D
sin-cos grids (ViT, MAE, video) and diffusion timestep embeddings, each written to .npy, .npz
or .safetensors with the spec that made it; heatmaps of them (plot).

Every value is within 1 ULP of the correctly rounded true value (in practice it is that
value); `fastpe check` verifies this on this machine.  Backends, in the order the default
tries them: {", ".join(f"{name} ({_BACKEND_NOTES.get(name, name)})" for name in BACKENDS)};
--backend or $FASTPE_BACKEND picks one, `fastpe info` shows which load here.
"""


@click.group(cls=FastpeGroup, help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help=options.VERBOSE_HELP)
@click.option("-q", "--quiet", count=True, help=options.QUIET_HELP)
@click.version_option(__version__, "-V", "--version", prog_name="fastpe", message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: int) -> None:
    # the help is _HELP
    ctx.ensure_object(dict)
    ctx.obj["verbosity"] = verbose - quiet


def _command(name: str) -> click.Command | None:
    """The command ``name`` of :data:`_COMMAND_SOURCES`, imported and registered on ``main``
    the first time it is asked for; ``None`` for any other name."""
    command = main.commands.get(name)
    if command is not None or name not in _COMMAND_SOURCES:
        return command
    module, attribute = _COMMAND_SOURCES[name]
    loaded = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    with _loading:  # two threads asking at once register it once
        if name not in main.commands:
            # -v/-q are the group's; every command takes them too, after its name
            loaded.params.extend(options.verbosity_options())
            main.add_command(loaded, name)
    return main.commands[name]


def __getattr__(name: str):
    # COMMANDS loads every command: only the help, the tests and tools walking the group need that
    if name == "COMMANDS":
        return tuple(_command(command) for command in _COMMAND_SOURCES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
