"""An interface's own workload fields are declared in its module (Interface.fields) and merged into
workload.Workload by the registry; set on a workload of another interface, they are refused. Pure: no cluster."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from fathom import interfaces
from fathom.suite import spec, workload
from fathom.interfaces.base import Interface, OwnFields
from fathom.suite.workload import CommonFields, Workload

OWNERS = {n: interfaces.get(n) for n in interfaces.names() if interfaces.get(n).fields is not None}


def a_value(model: type[BaseModel], key: str) -> Any:
    """A value the field takes (by its type), so that only whose field it is decides."""
    ann = str(model.model_fields[key].annotation)
    return True if "bool" in ann else 1 << 20 if "int" in ann else "/x"


def unbound(decorator: Any) -> Any:
    """A validator's own function (pydantic binds a classmethod to each class that inherits it)."""
    return getattr(decorator.func, "__func__", decorator.func)


def test_the_fields_are_declared_in_their_interfaces_module_and_merged_into_the_workload():
    assert set(OWNERS) >= {"s3", "nfs", "null"}
    assert interfaces.get("s3").own_fields == ("placement", "tls", "max_inflight", "bucket")
    assert interfaces.get("null").own_fields == ("delay_us",)
    assert interfaces.get("nfs").own_fields == ("server", "export")
    for name, iface in OWNERS.items():
        model = iface.fields
        assert model is not None and issubclass(model, OwnFields)
        assert model is importlib.import_module(f"fathom.interfaces.{name}").Fields  # its own module's
        assert iface.own_fields == tuple(model.model_fields)  # no second list
        for key, f in model.model_fields.items():
            wf = Workload.model_fields[key]
            assert (wf.annotation, wf.default, wf.metadata) == (f.annotation, f.default, f.metadata)
        # its validators run in the workload (none hidden by a name the workload or another interface uses)
        for kind in ("field_validators", "model_validators"):
            own = getattr(model.__pydantic_decorators__, kind)
            merged = getattr(Workload.__pydantic_decorators__, kind)
            assert {k: unbound(merged[k]) for k in own if k in merged} == {k: unbound(d) for k, d in own.items()}
    owned = set(interfaces.own_fields())
    assert set(workload.OWN_FIELDS) == owned and owned <= set(workload.WORKLOAD_FIELDS)
    # the workload is the common fields, the interfaces' own and its sweep: nothing else, nothing twice
    assert not owned & set(CommonFields.model_fields)
    assert list(Workload.model_fields) == [*CommonFields.model_fields,
                                           *(k for k in Workload.model_fields if k in owned), "sweep"]
    assert set(Workload.model_fields) == {*CommonFields.model_fields, *owned, "sweep"}


def test_workload_py_declares_no_interface_field():
    tree = ast.parse(Path(workload.__file__).read_text())
    declared = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert not declared & set(interfaces.own_fields())


def test_sweepable_interface_fields_are_marked_in_their_module():
    assert interfaces.get("s3").sweepable == ("placement", "tls")
    assert interfaces.get("null").sweepable == ("delay_us",)
    assert {"placement", "tls", "delay_us"} <= set(workload.SWEEPABLE)
    assert not {"max_inflight", "bucket", "server", "export"} & set(workload.SWEEPABLE)
    assert workload.SWEEPABLE[-len(interfaces.sweepable()):] == interfaces.sweepable()


def test_a_field_of_one_interface_is_refused_on_another():
    for owner, iface in OWNERS.items():
        for other in interfaces.names():
            if other == owner:
                continue
            path = {"path": "/tmp"} if interfaces.get(other).needs_path else {}
            for key in iface.own_fields:
                with pytest.raises(ValidationError, match=f"{key} applies to the {owner} interface, not to {other}"):
                    Workload.model_validate({"name": "w", "interface": other, **path,
                                             key: a_value(iface.fields, key)})  # type: ignore[arg-type]


def test_own_fields_on_their_interface_keep_their_validation_and_defaults():
    w = Workload.model_validate({"name": "w", "interface": "s3", "rw": "write", "max_inflight": "16MiB",
                                 "tls": "true", "placement": "p"})
    assert (w.max_inflight, w.tls, w.placement) == (16 << 20, True, "p")
    assert w.params()["max_inflight"] == 16 << 20
    for bad in ("My_Bucket", "ab", "-ab", "a" * 64):  # a bucket: S3's names only, and not with a placement
        with pytest.raises(ValidationError, match=f"bucket '{bad}' is not an S3 bucket name"):
            Workload.model_validate({"name": "w", "interface": "s3", "bucket": bad})
    assert Workload.model_validate({"name": "w", "interface": "s3", "bucket": "my.bucket-1"}).params()["bucket"] \
        == "my.bucket-1"
    with pytest.raises(ValidationError, match="bucket and placement: a placement applies to the buckets fathom"):
        Workload.model_validate({"name": "w", "interface": "s3", "bucket": "b-1", "placement": "p"})
    with pytest.raises(ValidationError) as e:
        Workload.model_validate({"name": "w", "interface": "s3", "max_inflight": "lots"})
    assert e.value.errors()[0]["loc"] == ("max_inflight",) and "expected a size" in str(e.value)
    w = Workload.model_validate({"name": "w", "interface": "null", "delay_us": "250"})
    assert w.delay_us == 250 and w.params()["delay_us"] == 250
    with pytest.raises(ValidationError) as e:
        Workload.model_validate({"name": "w", "interface": "null", "delay_us": -1})
    assert e.value.errors()[0]["loc"] == ("delay_us",)
    plain = Workload.model_validate({"name": "w"})
    assert all(getattr(plain, k) is None for k in interfaces.own_fields())
    assert not set(interfaces.own_fields()) & set(plain.params())  # unset: absent from params


def test_unknown_fields_are_still_refused_by_name():
    with pytest.raises(ValidationError) as e:
        Workload.model_validate({"name": "w", "interface": "s3", "plcement": "x"})
    assert [(x["type"], x["loc"]) for x in e.value.errors()] == [("extra_forbidden", ("plcement",))]
    with pytest.raises(spec.SuiteError) as s:
        spec.parse("name: t\nworkloads:\n  - {name: w, interface: s3, plcement: x}\n", "s.yaml")
    text = str(s.value)
    assert "s.yaml:3" in text and "unknown field 'workloads[0].plcement'; did you mean 'placement'?" in text
    assert "allowed here: name, engine" in text and "max_inflight" in text and "server" in text


def test_the_merge_refuses_a_field_two_interfaces_declare_or_one_not_defaulting_to_none(monkeypatch):
    class Twice(OwnFields):
        tls: bool | None = None

    class Given(OwnFields):
        depth: int = 3

    interfaces.names()  # the registry loaded
    for model, said in ((Twice, "interfaces s3 and zz both declare 'tls'"), (Given, "'depth' must default to None")):
        monkeypatch.setitem(interfaces.TABLE.modules, "zz", "fathom.interfaces.null")  # its line in the table
        monkeypatch.setitem(interfaces.TABLE._loaded, "zz", Interface(name="zz", needs_cluster=False,
                                                                      rw_modes=("read",), section=lambda p, c: None,
                                                                      fields=model))
        with pytest.raises(TypeError, match=said):
            interfaces.fields_model()
