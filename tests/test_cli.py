"""The command table in cli/main.py must name exactly what each module registers."""

from __future__ import annotations

import argparse
import importlib

import pytest

from fathom.cli.main import COMMANDS, build_parser, main

GROUPS: dict[str, tuple[str, ...]] = {}
for _cmd, _mod in COMMANDS.modules.items():
    GROUPS[_mod] = GROUPS.get(_mod, ()) + (_cmd,)


@pytest.mark.parametrize("module, commands", list(GROUPS.items()))
def test_each_module_registers_exactly_its_commands(module: str, commands: tuple[str, ...]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    assert tuple(sub.choices) == commands


def test_one_command_builds_only_its_group_and_help_builds_all() -> None:
    sub = next(a for a in build_parser("bench")._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"bench", "cleanup"}
    sub = next(a for a in build_parser(None)._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS.names())


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nosuch"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "slo"])
def test_mgr_prometheus_help_says_the_mgr_respawns(command: str) -> None:
    """Enabling or disabling a mgr module restarts the active mgr's modules: the option must say so."""
    sub = next(a for a in build_parser(command)._actions if isinstance(a, argparse._SubParsersAction))
    (opt,) = [a for a in sub.choices[command]._actions if "--mgr-prometheus" in a.option_strings]
    assert "respawns" in opt.help and "disabled again at the end" in opt.help, opt.help


@pytest.mark.parametrize("argv, dest, name_is_the_runs", [
    (["run", "osd-classic"], "client_name", True), (["slo", "osd-classic"], "client_name", True),
    (["cluster", "status"], "client_name", False), (["cluster", "restore"], "client_name", False),
    (["bench", "rados", "-p", "p", "10", "write"], "name", False), (["cleanup", "-p", "p"], "name", False)])
def test_one_spelling_for_the_ceph_client_name_on_every_command(argv: list[str], dest: str,
                                                                 name_is_the_runs: bool) -> None:
    """--client-name names the Ceph client everywhere; --name stays its alias where it means nothing else."""
    args = build_parser(argv[0]).parse_args([*argv, "--client-name", "client.bench"])
    assert getattr(args, dest) == "client.bench"
    args = build_parser(argv[0]).parse_args([*argv, "--name", "x"])
    assert getattr(args, dest) == (None if name_is_the_runs else "x")
    assert not name_is_the_runs or args.name == "x"  # run and slo: the run's name
