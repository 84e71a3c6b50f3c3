"""One parser style for the command lines: tyro over a frozen dataclass whose checks live in its ``__post_init__``,
and every refusal one line on stderr with exit status 2, before any work.

tyro draws a ValueError raised while it builds the dataclass, and a value outside a ``Literal``'s choices, as a
multi-line box. ``parse`` carries the dataclass's own ValueError past tyro (as ``Refused``, which tyro does not catch)
and prints it as ``prog: error: message``; ``choice``, ``whole`` and ``folder`` are field rules that refuse a bad
choice, a number that is not a whole one (tyro's box for ``--jobs 1.5``) or an empty folder the same way (tyro reads
``--out ""`` as ``Path("")``, the current folder, so a field check comes late); ``as_float`` reads a union with float
as one float. ``check_device`` is the one rule for a ``--device`` value, checked before any work.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class Refused(Exception):
    """A command-line value refused by a check: one line. Not a ValueError, so tyro lets it through."""


def choice(flag: str, choices: tuple[str, ...]):
    """The tyro rule of a ``Literal`` field (``Annotated[Literal[...], choice(flag, choices)]``): a value outside
    ``choices`` is refused in one line naming ``flag``; ``--help`` lists the choices."""
    from tyro.constructors import PrimitiveConstructorSpec

    def read(strings: list[str]) -> str:
        if strings[0] not in choices:
            raise Refused(f"{flag} must be one of {', '.join(choices)}, got {strings[0]!r}")
        return strings[0]

    return PrimitiveConstructorSpec(nargs=1, metavar="{" + ",".join(choices) + "}", instance_from_str=read,
                                    is_instance=lambda value: value in choices, str_from_instance=lambda value: [value])


def whole(flag: str, minimum: int, what: str):
    """The tyro rule of an optional whole-number field (``Annotated[int | None, whole(flag, minimum, what)]``, default
    None): a value that is not a whole number >= ``minimum`` is refused in one line naming ``flag`` and ``what``
    it counts."""
    from tyro.constructors import PrimitiveConstructorSpec

    def read(strings: list[str]) -> int:
        try:
            value = int(strings[0])
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise Refused(f"{flag} must be a whole number of {what} >= {minimum}, got {strings[0]!r}")
        return value

    return PrimitiveConstructorSpec(nargs=1, metavar="INT", instance_from_str=read,
                                    is_instance=lambda value: value is None or isinstance(value, int),
                                    str_from_instance=lambda value: [str(value)])


def folder(flag: str, hint: str = "give a folder (use . for the current one)"):
    """The tyro rule of a folder field (``Annotated[Path, folder(flag)]``, or ``Path | None``): an empty value is
    refused in one line naming ``flag`` (tyro alone would read it as the current folder)."""
    from tyro.constructors import PrimitiveConstructorSpec

    def read(strings: list[str]) -> Path:
        if strings[0].strip() == "":
            raise Refused(f"{flag} is empty; {hint}")
        return Path(strings[0])

    return PrimitiveConstructorSpec(nargs=1, metavar="PATH", instance_from_str=read,
                                    is_instance=lambda value: value is None or isinstance(value, Path),
                                    str_from_instance=lambda value: [str(value)])


def flag(name: str) -> str:
    """The command-line flag of the dataclass field ``name`` (tyro writes underscores as hyphens)."""
    return "--" + name.replace("_", "-")


def check_device(device: str) -> None:
    """One-line ValueError unless ``device`` is cpu, or cuda / cuda:N on a machine where torch sees a CUDA device."""
    import torch

    kind, _, index = device.partition(":")
    if device != "cpu" and not (kind == "cuda" and (index == "" or index.isdigit())):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device} requested but torch sees no CUDA device on this machine; use --device cpu")


def as_float(annotation, registry=None):
    """``registry`` (a new tyro ConstructorRegistry when None) with a rule under which a field typed ``annotation``, a
    union with float (GAC's ``float | ThresholdRule``), is given on the command line as one float."""
    import tyro

    registry = registry or tyro.constructors.ConstructorRegistry()

    @registry.primitive_rule
    def _as_float(type_info):
        if type_info.type != annotation:
            return None
        return tyro.constructors.PrimitiveConstructorSpec(
            nargs=1, metavar="FLOAT", instance_from_str=lambda strings: float(strings[0]),
            is_instance=lambda value: isinstance(value, float), str_from_instance=lambda value: [str(value)])

    return registry


def checked_registry(types: tuple[type, ...], registry=None):
    """``registry`` (a new tyro ConstructorRegistry when None) with a rule under which a ValueError of building one of
    ``types`` (its ``__post_init__`` check) is raised as ``Refused``, past tyro's error box."""
    import tyro

    registry, building = registry or tyro.constructors.ConstructorRegistry(), []

    @registry.struct_rule
    def _checked(type_info):
        if type_info.type not in types or building:
            return None
        building.append(True)  # the default rule builds the spec; this rule steps aside meanwhile
        try:
            spec = tyro.constructors.ConstructorRegistry.get_struct_spec(type_info)
        finally:
            building.pop()

        def instantiate(**kwargs):
            try:
                return spec.instantiate(**kwargs)
            except ValueError as err:
                raise Refused(str(err)) from None

        return dataclasses.replace(spec, instantiate=instantiate)

    return registry


def fail(prog: str, message: str) -> None:
    """Print ``prog: error: message`` on stderr and exit 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse(cls: type[T], argv: list[str] | None, prog: str, description: str | None = None) -> T:
    """``tyro.cli(cls)`` on ``argv`` (None: sys.argv[1:]); a refusal of ``cls``'s ``__post_init__`` or of a field rule
    (``choice``, ``whole``, ``folder``) exits 2 with one line naming the value, before the caller does any work."""
    import tyro

    try:
        return tyro.cli(cls, args=sys.argv[1:] if argv is None else list(argv), prog=prog, description=description,
                        registry=checked_registry((cls,)))
    except Refused as err:
        fail(prog, str(err))
