"""Random small generator specs (Hypothesis), shared by the generator's and the Spark
source's tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_TYPES = (
    *("int2", "int4", "int8", "float8", "numeric", "text", "bool", "date", "timestamptz"),
    *("uuid", "jsonb", "bytea", "interval", "inet", "text[]", "int8[]", "numeric[]"),
)


@st.composite
def small_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec exercising every feature at a tiny scale (blocks of 1 to 25 changes)."""

    def table(i: int) -> dict[str, Any]:
        columns: list[dict[str, Any]] = [
            {"name": "id", "type": draw(st.sampled_from(["int4", "int8", "text", "uuid"])),
             "key": True}
        ]  # fmt: skip
        for j, type_name in enumerate(draw(st.lists(st.sampled_from(_TYPES), max_size=4))):
            columns.append(
                {"name": f"c{j}", "type": type_name,
                 "null_ratio": draw(st.sampled_from([0.0, 0.3, 1.0]))}
            )  # fmt: skip
        if draw(st.booleans()):
            toast = draw(st.sampled_from([0.5, 1.0]))
            columns.append(
                {"name": "big", "type": "text", "toast_ratio": toast, "toast_size": 2100}
            )
        return {
            "name": f"s.t{i}",
            "columns": columns,
            "hot_keys": draw(st.integers(1, 5)),
            "truncate_every": draw(st.sampled_from([0, 0, 7, 30])),
        }

    insert = draw(st.sampled_from([0.2, 0.5, 1.0]))
    output = draw(
        st.sampled_from(
            [
                {"proto_version": 1},
                {"proto_version": 2, "streaming": "on", "binary": True, "messages": True},
                {"proto_version": 4, "streaming": "parallel", "two_phase": True},
                {"proto_version": 3, "two_phase": True, "messages": True},
            ]
        )
    )
    return {
        "tables": [table(i) for i in range(draw(st.integers(1, 3)))],
        "operations": {
            "insert": insert,
            "update": draw(st.sampled_from([0.0, 0.3])),
            "key_update": draw(st.sampled_from([0.0, insert / 4])),
            "delete": draw(st.sampled_from([0.0, insert / 2])),
        },
        "transactions": {
            "size": {
                "distribution": draw(st.sampled_from(["fixed", "uniform", "geometric"])),
                "min": 1,
                "max": 6,
                "mean": 2,
            },
            "two_phase": {"ratio": draw(st.sampled_from([0.0, 0.3])), "rollback_ratio": 0.5},
        },
        "messages": {"ratio": draw(st.sampled_from([0.0, 0.1]))},
        "large_transactions": {
            "ratio": draw(st.sampled_from([0.0, 0.5])),
            "chunk": draw(st.integers(1, 5)),
            "subtransaction_size": draw(st.integers(1, 4)),
            "subtransaction_abort_ratio": 0.5,
            "abort_ratio": 0.5,
            "abort_size": 3,
        },
        "block_size": draw(st.integers(1, 25)),
        "pool_size": 8,
        "output": output,
    }
