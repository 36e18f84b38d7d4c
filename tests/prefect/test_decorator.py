"""@leased_flow as a Prefect user meets it: a real Flow with the same
parameter schema as @flow, @flow's arguments passed through, bad settings
refused at decoration time with the bad value named."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import cloudpickle
import pytest
from prefect import flow
from prefect.flows import Flow

from lease_integrations import ConfigurationError, connect
from lease_integrations.core.supersede_guards import only_newer, only_same
from lease_integrations.prefect import leased_flow


def plain(tenant: str, day: int = 1, *, dry_run: bool = False) -> str:
    """Bill one tenant for one day."""
    return f"{tenant}-{day}-{dry_run}"


async def plain_async(tenant: str, day: int = 1) -> str:
    return f"{tenant}-{day}"


def test_a_real_flow_with_the_same_schema_as_flow() -> None:
    leased = leased_flow(key="billing-{tenant}", ttl=5, store="memory://schema")(plain)
    reference = flow(plain)
    assert isinstance(leased, Flow)
    assert leased.parameters == reference.parameters
    assert inspect.signature(leased.fn) == inspect.signature(plain)
    assert leased.name == "plain" and leased.description == "Bill one tenant for one day."
    assert leased.version == reference.version  # hash of the user's file, not ours
    assert not leased.isasync
    leased_async = leased_flow(store="memory://schema")(plain_async)
    assert leased_async.isasync and inspect.iscoroutinefunction(leased_async.fn)
    assert leased_async.parameters == flow(plain_async).parameters


def test_flow_arguments_pass_through() -> None:
    leased = leased_flow(name="nightly billing", retries=2, retry_delay_seconds=3,
                         log_prints=True, timeout_seconds=60, store="memory://args")(plain)
    assert (leased.name, leased.retries, leased.retry_delay_seconds) == ("nightly billing", 2, 3)
    assert leased.log_prints is True and leased.timeout_seconds == 60
    # The default key comes from the flow name, made key-safe.
    assert leased.lease_plan.key.template == "nightly-billing"


def test_bare_decorator_uses_the_flow_name() -> None:
    @leased_flow
    def nightly_export() -> None:
        pass

    assert isinstance(nightly_export, Flow)
    assert nightly_export.lease_plan.key.template == "nightly-export"
    assert nightly_export.lease_plan.on_busy == "skip"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"ttl": -1}, "-1"),
        ({"ttl": "30"}, "'30'"),
        ({"on_busy": "queue"}, "'queue'"),
        ({"on_lost": "ignore"}, "'ignore'"),
        ({"on_lost": "interrupt"}, "'interrupt' was replaced by 'exit'"),
        ({"on_lost": "cancel"}, "applies to async flows only"),  # plain is sync
        ({"heartbeat": 20, "ttl": 30}, "heartbeat=20"),
        ({"wait_timeout": 5}, "wait_timeout=5"),
        ({"on_busy": "wait", "wait_timeout": -2}, "-2"),
        ({"key": "billing {tenant}"}, "billing {tenant}"),
        ({"key": "billing-{tennant}"}, "{tennant}"),
        ({"key": "billing-{0}"}, "{0}"),
        ({"key": "billing-{tenant"}, "billing-{tenant"),
        ({"key": 42}, "42"),
        ({"store": "reddis://localhost"}, "'reddis'"),
        ({"store": "redis://localhost:notaport"}, "a port that is not a number"),
        ({"store": "block:"}, "'block:'"),
        ({"store": 3.5}, "3.5"),
        ({"annotate": "yes"}, "'yes'"),
        ({"retrys": 3}, "retrys"),
        ({"supersede_if": only_newer()}, "supersede_if=only_newer('logical_date') only applies "
                                         "to on_busy='supersede' (on_busy is 'skip')"),
        ({"on_busy": "supersede", "supersede_if": "newer"},
         "supersede_if must be a callable (holder_meta, new_meta) -> bool, got 'newer'"),
        ({"on_busy": "supersede", "wait_timeout": 5}, "wait_timeout=5"),
        ({"on_busy": "replace"}, "'replace'"),
    ],
)
def test_bad_settings_are_refused_at_decoration(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        leased_flow(**options)(plain)
    assert named in str(raised.value)


@pytest.mark.parametrize(("key", "says"), [
    ("billing {tenant}", "its text has ' ', outside the safe set"),
    ("_{tenant}", "it must start with a letter, a digit or a {field}"),
])
def test_a_bad_key_template_is_explained_in_its_own_text(key: str, says: str) -> None:
    # The fixed text is checked with each field as "x": that stand-in once
    # showed in the message ("lease key 'billing x' has characters ...").
    with pytest.raises(ConfigurationError) as raised:
        leased_flow(key=key)(plain)
    assert str(raised.value) == f"key template {key!r} is not a valid key: {says}" + (
        " (letters, digits and . _ : / @ = + -)" if "safe set" in says else "")


def test_bad_functions_are_refused() -> None:
    def gen() -> Any:
        yield 1

    with pytest.raises(ConfigurationError, match="generator"):
        leased_flow(gen)
    with pytest.raises(ConfigurationError, match="already a Prefect flow"):
        leased_flow(flow(plain))


def test_loss_policies_are_exit_check_and_cancel_for_async_flows() -> None:
    """``exit`` (the default: end the process, report the run Crashed),
    ``check`` (stop nothing), ``cancel`` (async flows: cancel the body)."""
    assert leased_flow(store="memory://policy")(plain).lease_plan.on_lost == "exit"
    assert leased_flow(on_lost="check", store="memory://policy")(plain).lease_plan.on_lost == "check"
    cancelled = leased_flow(on_lost="cancel", store="memory://policy")(plain_async)
    assert cancelled.lease_plan.on_lost == "cancel"
    sync = leased_flow(store="memory://policy")(plain)
    with pytest.raises(ConfigurationError, match="async flows only"):
        sync.with_options(on_lost="cancel")
    assert sync.with_options(on_lost="check").lease_plan.on_lost == "check"


def test_a_template_may_name_parameters_taken_by_kwargs() -> None:
    def anything(**params: Any) -> None:
        pass

    f = leased_flow(key="job-{region}", store="memory://kw")(anything)
    assert f.lease_plan.key.render((), {"region": "eu"}) == "job-eu"


def test_template_rendering_uses_defaults_and_checks_values() -> None:
    f = leased_flow(key="billing-{tenant}-{day}", store="memory://render")(plain)
    assert f.lease_plan.key.render(("acme",), {}) == "billing-acme-1"
    with pytest.raises(ConfigurationError, match="a b"):
        f.lease_plan.key.render(("a b",), {})


def test_flows_travel_to_other_processes_with_a_url_not_a_live_store() -> None:
    """serve() and workers pickle the flow: a URL travels, a connection cannot."""
    by_url = leased_flow(store="sqlite:///tmp/never-opened.db")(plain)
    clone = pickle.loads(cloudpickle.dumps(by_url))
    assert clone.lease_plan.source.url == "sqlite:///tmp/never-opened.db"
    with pytest.raises(TypeError, match="live store object"):
        cloudpickle.dumps(leased_flow(store=connect("memory://live"))(plain))


def test_nothing_is_opened_at_decoration(tmp_path: Any) -> None:
    db = tmp_path / "leases.db"
    leased_flow(store=f"sqlite://{db}")(plain)
    assert not db.exists()


def test_flow_fn_called_directly_still_takes_the_lease() -> None:
    """Unit tests call ``my_flow.fn()`` without any Prefect run: the lease is
    still taken (and logged to the library's logger)."""
    from lease_integrations.prefect import current_lease

    url = "memory://direct-fn"

    @leased_flow(key="direct", store=url)
    def job(n: int) -> tuple[int, int]:
        return n, current_lease().token

    (n7, first), (n8, second) = job.fn(7), job.fn(8)
    assert (n7, n8) == (7, 8) and first < second
    record = connect(url).get("direct")
    assert record is not None and record.holder is None and record.token == second


def test_supersede_is_an_on_busy_policy_with_a_guard_also_in_with_options() -> None:
    """``on_busy="supersede"`` with or without ``supersede_if``, at the
    decorator and in ``with_options`` (which validates as the decorator does)."""
    guard = only_same("parameters_sha256")
    leased = leased_flow(key="k", ttl=5, store="memory://sup", on_busy="supersede",
                         supersede_if=guard)(plain)
    assert (leased.lease_plan.on_busy, leased.lease_plan.guard) == ("supersede", guard)
    assert leased_flow(on_busy="supersede")(plain).lease_plan.guard is None
    plain_flow = leased_flow(key="k", ttl=5, store="memory://sup")(plain)
    newer = only_newer("scheduled_start")
    tuned = plain_flow.with_options(on_busy="supersede", supersede_if=newer)
    assert (tuned.lease_plan.supersede, tuned.lease_plan.guard) == (True, newer)
    assert plain_flow.lease_plan.supersede is False
    with pytest.raises(ConfigurationError, match="only applies to on_busy='supersede'"):
        plain_flow.with_options(supersede_if=newer)
    with pytest.raises(ConfigurationError, match="only applies to on_busy='supersede'"):
        tuned.with_options(on_busy="fail")  # the guard it carries no longer applies
    with pytest.raises(ConfigurationError, match="supersede_if must be a callable"):
        plain_flow.with_options(on_busy="supersede", supersede_if=42)


def test_only_a_superseding_flow_writes_its_parameters_into_the_lease_meta() -> None:
    """Parameters may be sensitive, and every history event copies meta: a
    flow keeps only their digest there unless a guard may need them."""
    skipping = leased_flow(key="k", ttl=5, store="memory://meta")(plain)
    superseding = leased_flow(key="k", ttl=5, store="memory://meta", on_busy="supersede")(plain)
    skip_meta = skipping.lease_plan.lock_for(("acme",), {}).meta
    sup_meta = superseding.lease_plan.lock_for(("acme",), {}).meta
    assert "parameters" not in skip_meta
    assert sup_meta["parameters"] == {"tenant": "acme", "day": 1, "dry_run": False}
    assert skip_meta["parameters_sha256"] == sup_meta["parameters_sha256"]
