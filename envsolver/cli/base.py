"""The machinery every `envsolver` command shares: the `Group` class whose handler maps every outcome to a message
and an exit code (0, 1, 2, 130), and the `Command` class that tells it whether the command runs with --json.

Command modules (main.py's plan commands, install.py, hook.py, verify.py) define their commands with
`cls=Command`; main.py builds the `main` group from `Group` and names the others in its `lazy` table, so that a
command's module is imported only when that command runs (or its help is shown): `envsolver gpus` does not import
install, verify, hook or cluster. Nothing here imports a command module by name, so there is no circle.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from envsolver.core import interrupts
from envsolver.core.errors import (
    INTERRUPTED,
    INTERRUPTED_EXIT,
    INTERRUPTED_FIX,
    ConflictError,
    EnvsolverError,
    Kind,
    Terminated,
    failure,
    split_fix,
)
from envsolver.core.printable import printable
from envsolver.core.redact import redact_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from envsolver.cli.render import Plain

INTERNAL = "internal error"
STDOUT_CLOSED_EXIT = 1  # the reader closed stdout before the command finished (`| head -1`): quiet, as click does
_JSON = "envsolver.json"  # ctx.meta: whether the command runs with --json (parent and child contexts share meta)
_ARGV = "envsolver.argv"
_LEVEL = "envsolver.verbosity"  # ctx.meta: -1 with -q, 1 with -v, else 0
_START = "envsolver.start"  # ctx.meta: time.monotonic() when the command line was parsed
# Every command's -h as well as --help: set on the main group, inherited by every subcommand's context.
CONTEXT = {"help_option_names": ["-h", "--help"]}
F = TypeVar("F", bound=Callable[..., Any])
QUIET_HELP = (
    "Print no progress and no notices on stderr; warnings and errors still print, and --json output is the same."
)
VERBOSE_HELP = "Print on stderr, once the command is done, the seconds it took. --json output is the same."
# A help's examples and what follows them (a paragraph that starts "\b\nExamples:") are shown after the options.
_EXAMPLES = re.compile(r"\n\n(?=\x08\nExamples:)")


def verbose_help(steps: str) -> str:
    """-v's help for a command that prints its steps: STEPS says which, in the command's own words."""
    return (
        f"Print more on stderr: {steps}, each on a line of its own with the seconds since the start, and the "
        "seconds the command took. --json output is the same."
    )


def _wants_json(ctx: click.Context) -> bool:
    """--json as the command parsed it; before (or where) parsing failed, --json among the command's words."""
    if _JSON in ctx.meta:
        return bool(ctx.meta[_JSON])
    argv: tuple[str, ...] = ctx.meta.get(_ARGV, ())
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def error(text: str) -> None:
    """`error: TEXT` on stderr, TEXT's control characters spelled out (a message can quote what a node, a server
    or nvidia-smi said); its own newlines stay (a list of partitions). TEXT comes with its credentials masked."""
    click.echo(f"error: {printable(text, newlines=True)}", err=True)


def _fail(
    ctx: click.Context, code: int, kind: Kind, text: str, rejected: list[dict[str, object]] | None = None
) -> NoReturn:
    """`error: TEXT` on stderr; with --json also the failure document on stdout (TEXT as it is: JSON spells out
    control characters itself), with a conflict's `rejected` builds by reason. Exits with `code`."""
    error(text)
    if _wants_json(ctx):
        click.echo(json.dumps(failure(code, kind, *split_fix(text), rejected), indent=2))
    ctx.exit(code)


def _cleaned_up() -> None:
    """End what the interrupted command started outside the process (envsolver.core.interrupts.clean_up: its Slurm
    steps), each note on stderr."""
    for note in interrupts.clean_up():
        click.echo(f"note: {printable(note)}", err=True)


class UsageError(click.exceptions.UsageError):
    """click's usage error shown as envsolver shows its own errors: `error: MESSAGE FIX` (the fix as --json's
    document has it), then the command's usage on one line; exit 2."""

    def __init__(self, message: str, ctx: click.Context) -> None:
        super().__init__(message, ctx)
        self.where: str = ctx.command_path

    @property
    def fix(self) -> str:
        return f"Run `{self.where} --help` to see the options."

    def show(self, file: IO[Any] | None = None) -> None:
        error(f"{self.message} {self.fix}")
        if self.ctx is not None:
            pieces = self.ctx.command.collect_usage_pieces(self.ctx)
            click.echo(f"usage: {printable(' '.join([self.where, *pieces]))}", err=True)


def _ours(exc: click.exceptions.UsageError, ctx: click.Context) -> click.exceptions.UsageError:
    """click's usage error as envsolver's UsageError, its message given the full stop its fix follows. click's
    message quotes words of the command line as they are (`No such option: ...`, `Got unexpected extra argument
    (...)`): UsageError.show prints it through error(), which spells out their control characters. A bare
    `envsolver` or `envsolver cluster` (click's NoArgsIsHelpError, which shows the help) stays click's."""
    if isinstance(exc, (UsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    message = redact_text(exc.format_message())  # an extra argument can be a URL with its credentials
    if not message.endswith((".", "?", "!", ".)", "?)")):
        message += "."
    return UsageError(message, exc.ctx or ctx)


def _usage_failure(ctx: click.Context, shown: click.exceptions.UsageError) -> NoReturn:
    """A usage error: shown by click (UsageError.show), or with --json shown here with its failure document."""
    if not _wants_json(ctx) or not isinstance(shown, UsageError):
        raise shown from None
    shown.show()
    click.echo(json.dumps(failure(shown.exit_code, "usage", shown.message, shown.fix), indent=2))
    ctx.exit(shown.exit_code)


def _stdout_closed() -> bool:
    """Whether nothing reads stdout any more (`envsolver gpus | head -1` after head exits): the pipe's write end
    polls as an error once its read end is closed. A broken pipe to a child process (the rattler worker) is not
    this: it stays an error."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor behind stdout (a test runner's buffer)
        return False


def _end_quietly(ctx: click.Context) -> NoReturn:
    """End as `ls | head` ends once head has exited: nothing printed (there is no one to read it), exit 1 as click
    ends its own help on a closed pipe."""
    stdout_to_null()
    ctx.exit(STDOUT_CLOSED_EXIT)


def stdout_to_null() -> None:
    """stdout points at /dev/null from here on, so the interpreter's last flush does not report a closed pipe
    again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def io_message(exc: OSError) -> str:
    """The message of an OSError that no command turned into an error of its own (exit 2)."""
    where = f" ({str(exc.filename)!r})" if exc.filename else ""  # a local path, shown as it is
    return (
        f"{redact_text(exc.strerror or str(exc))}{where}. Check that the path exists and that you can read and "
        "write it, then run the same command again."
    )


def print_failed(exc: OSError, as_json: bool) -> int:
    """The exit code, after its message, when printing a result failed outside a click command (cli/fast.py), as
    Group ends it inside one: a closed stdout quietly (1), another failure with io_message (2)."""
    if isinstance(exc, BrokenPipeError) and _stdout_closed():
        stdout_to_null()
        return STDOUT_CLOSED_EXIT
    text = io_message(exc)
    error(text)
    if as_json:
        with contextlib.suppress(OSError):
            click.echo(json.dumps(failure(2, "io", *split_fix(text)), indent=2))
    return 2


def _worker_end_of_command() -> None:
    """A rattler worker a command started ahead (worker_call.prestart) and did not use ends with the command, also
    when the command runs in-process (tests, a caller of `main`); one that answered a solve is kept for the
    process's next call (worker_call.end_of_command)."""
    worker_call = sys.modules.get("envsolver.lock.worker_call")
    if worker_call is not None:
        worker_call.end_of_command()


def _set_level(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        level = 1 if param.name == "verbose" else -1
        if ctx.meta.get(_LEVEL, 0) not in (0, level):
            raise click.UsageError("-v/--verbose and -q/--quiet exclude each other. Pass one of them.", ctx)
        ctx.meta[_LEVEL] = level
    return value


def verbosity(func: F) -> F:
    """-v/--verbose and -q/--quiet on a command whose -v adds only the seconds it took; read them with level()."""
    return verbosity_of(None)(func)


def verbosity_of(steps: str | None) -> Callable[[F], F]:
    """-v/--verbose and -q/--quiet on a command whose -v also prints STEPS (verbose_help)."""

    def decorate(func: F) -> F:
        func = click.option(
            "-q", "--quiet", is_flag=True, expose_value=False, is_eager=True, callback=_set_level, help=QUIET_HELP
        )(func)
        said = VERBOSE_HELP if steps is None else verbose_help(steps)
        option = click.option(
            "-v", "--verbose", is_flag=True, expose_value=False, is_eager=True, callback=_set_level, help=said
        )
        return option(func)

    return decorate


def level() -> int:
    """-1 with -q, 1 with -v, else 0 (also outside a command)."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get(_LEVEL, 0)) if ctx is not None else 0


def diagnostics() -> Console:
    """The stderr console for progress and notices: silent with -q. Warnings go to render.console(stderr=True)."""
    from envsolver.cli import render

    err = render.console(stderr=True)
    err.quiet = level() < 0
    return err


def _started() -> float:
    """time.monotonic() when the command line was parsed (now, outside a command)."""
    ctx = click.get_current_context(silent=True)
    return float(ctx.meta.get(_START, time.monotonic())) if ctx is not None else time.monotonic()


# One detail line at a time: a progress callback is called from the threads of a command (downloads, op builds,
# the readers of torchrun's output), and Plain writes a line in two calls.
_DETAIL_LINE = threading.Lock()


def _detail_line(out: Console | Plain, start: float, line: str) -> None:
    from envsolver.cli import render

    with _DETAIL_LINE:
        render.text(out, f"[{time.monotonic() - start:7.2f}s] {redact_text(line)}")


def detail(out: Console | Plain, line: str) -> None:
    """With -v: `[  1.23s] LINE` on `out` (stderr), the seconds since the command line was parsed; LINE's
    credentials masked and its control characters spelled out (render.text)."""
    if level() > 0:
        _detail_line(out, _started(), line)


def err_out() -> Console | Plain:
    """stderr's printer for progress and notices as render.out makes it (rich only on a terminal); with -q, one
    that prints nothing. Warnings go to render.out(stderr=True), which -q does not silence."""
    import io

    from envsolver.cli import render

    return render.Plain(io.StringIO()) if level() < 0 else render.out(stderr=True)


def with_detail(out: Console | Plain, show: Callable[[str], None]) -> Callable[[str], None]:
    """A progress callback; with -v each message also stays on `out`, as a detail line, except a Fleeting one (the
    bytes of a download as they arrive). The level and the start are read here, in the command's thread: click's
    context is the thread's own, and the callback is called from the command's threads too (torchrun's readers,
    downloads, op builds), which have none."""
    if level() <= 0:
        return show
    from envsolver.net.progress import Fleeting

    start = _started()

    def both(message: str) -> None:
        show(message)
        if not isinstance(message, Fleeting):
            _detail_line(out, start, message)

    return both


def progress(status: Status) -> Callable[[str], None]:
    """The spinner's callback (render.progress); with -v each message also stays, as a detail line."""
    from envsolver.cli import render

    return with_detail(status.console, render.progress(status))


def _described(help_text: str | None) -> tuple[str, str]:
    """A command's help split in two: what it does, then its examples and what follows them."""
    text = inspect.cleandoc(help_text or "").partition("\f")[0]
    head, *tail = _EXAMPLES.split(text, maxsplit=1)
    return head, "".join(tail)


def _paragraph(formatter: click.HelpFormatter, text: str) -> None:
    if text:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(text)


class Command(click.Command):
    """Records whether this command runs with --json, once its options are parsed, for the handler in _Group.
    Its help has one layout, whichever part of it the examples are written in: usage, what the command does,
    the options, then the examples and the rest (exit codes, the epilog)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _paragraph(formatter, _described(self.help)[0])

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _paragraph(formatter, _described(self.help)[1])
        _paragraph(formatter, inspect.cleandoc(self.epilog or ""))

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[_JSON] = bool(ctx.params.get("as_json"))
        result = super().invoke(ctx)
        if level() > 0:
            detail(diagnostics(), f"{ctx.command_path}: done")
        return result


class Group(click.Group):
    """Maps every outcome to a message on stderr and exit 0, 1, 2 or 130, in one place: EnvsolverError to its
    message and exit code; an OSError that no command turned into an error to exit 2 naming the file; Ctrl-C to
    exit 130 (SIGTERM to 143 and SIGHUP to 129 where a command turns them into errors.Terminated); a closed stdout
    (`| head -1`) to exit 1 with nothing printed, as click ends its own help there; anything else
    (a bug) to exit 2 with an `internal error` line instead of a traceback (ENVSOLVER_DEBUG=1 shows the
    traceback instead, for a bug report). With --json, each of these and click's
    usage errors also print `{"ok": false, "exit_code", "error": {"kind", "message", "fix"}}` on stdout. Every
    message is passed through redact_text, so no credential reaches the terminal or a log."""

    command_class = Command

    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        """`lazy`: command name -> ("module:attribute" of the command, the first paragraph of its help). The
        module is imported when the command is looked up; the group's --help lists it from the summary alone."""
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, tuple[str, str]] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name][0].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with a command that is not imported yet shown by its summary: the same line."""
        loaded, self.commands = (
            self.commands,
            {
                **{name: click.Command(name, help=summary) for name, (_, summary) in self.lazy.items()},
                **self.commands,
            },
        )
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.commands = loaded

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = tuple(args)
        ctx.meta.setdefault(_START, time.monotonic())
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.UsageError as exc:  # `envsolver --bogus`
            _usage_failure(ctx, _ours(exc, ctx))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return self._invoke(ctx)
        finally:
            _worker_end_of_command()

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                result = super().invoke(ctx)
                sys.stdout.flush()  # what is still buffered fails here, where a closed pipe is told apart
                return result
            except BrokenPipeError:
                if _stdout_closed():
                    _end_quietly(ctx)
                raise
        except click.exceptions.UsageError as exc:
            _usage_failure(ctx, _ours(exc, ctx))
        except (click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except Terminated as exc:  # SIGTERM or SIGHUP where the command asked for it (envsolver.core.interrupts)
            _cleaned_up()
            _fail(ctx, exc.exit_code, "interrupted", f"terminated ({exc.name}). {INTERRUPTED_FIX}")
        except (KeyboardInterrupt, click.exceptions.Abort):
            if sys.stderr.isatty():
                click.echo(err=True)  # past the terminal's ^C
            _cleaned_up()
            _fail(ctx, INTERRUPTED_EXIT, "interrupted", f"{INTERRUPTED} {INTERRUPTED_FIX}")
        except EnvsolverError as exc:
            by_reason = exc.by_reason if isinstance(exc, ConflictError) else ()
            rejected = [g.to_json() for g in by_reason] if exc.kind == "conflict" else None
            _fail(ctx, exc.exit_code, exc.kind, redact_text(str(exc)), rejected)
        except OSError as exc:
            _fail(ctx, 2, "io", io_message(exc))
        except Exception as exc:
            if os.environ.get("ENVSOLVER_DEBUG"):
                raise
            _fail(
                ctx,
                2,
                "internal",
                f"{INTERNAL} ({type(exc).__name__}: {redact_text(str(exc))[:500]}). This is a bug in envsolver, not "
                "in your input. Report it with the command you ran.",
            )
