"""The peers of the durable 10-step comparison, each as its own documentation writes it.

Runs in the peers' own venv (``bench/peers/make-venv.sh`` -> ``.venv-peers``), never in
Tether's; :mod:`bench.durable_step` starts one process per peer and drives it over stdin/stdout:

    .venv-peers/bin/python bench/peers/durable_peers.py dbos DATA_DIR
    .venv-peers/bin/python bench/peers/durable_peers.py langgraph DATA_DIR

Each line read (``run``) starts one durable run of ten steps on a fresh workflow id / thread id
and answers one line: the run's wall time in seconds, measured around the call that returns
its result. ``quit`` (or end of input) stops the peer.

- **DBOS**: a ``@DBOS.workflow()`` calling a ``@DBOS.step()`` ten times, then returning the
  answer; the system database is SQLite (DBOS's default, ``sqlite:///DATA_DIR/dbos.sqlite``),
  which commits every step's output before the workflow goes on.
- **LangGraph**: a ``StateGraph`` whose ``tick`` node loops ten times, then ``answer``; compiled
  with ``SqliteSaver`` on ``DATA_DIR/langgraph.sqlite`` and invoked with ``durability="sync"``
  (the checkpoint of each step is written before the next step starts).

Both write with SQLite's defaults for these libraries (WAL, ``synchronous`` as they leave it),
in DATA_DIR, the directory where the Tether side keeps its Redis AOF and its store.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

STEPS = 10
ANSWER = "ten steps"


class State(TypedDict):
    """The LangGraph side's state (module level: LangGraph reads the annotations)."""

    done: int
    out: str


def dbos_runner(data_dir: Path) -> Callable[[], str]:
    """One DBOS workflow of ten steps per call, on a SQLite system database in ``data_dir``."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    @DBOS.step()
    def tick(n: int) -> str:
        return f"tick {n}"

    @DBOS.workflow()
    def steps10() -> str:
        for n in range(1, STEPS + 1):
            tick(n)
        return ANSWER

    config: DBOSConfig = {
        "name": "tether-bench-durable",
        "system_database_url": f"sqlite:///{data_dir / 'dbos.sqlite'}",
    }
    DBOS(config=config)
    DBOS.launch()

    def run() -> str:
        with SetWorkflowID(str(uuid.uuid4())):
            return str(steps10())

    return run


def langgraph_runner(data_dir: Path) -> Callable[[], str]:
    """One LangGraph run of ten ``tick`` steps per call, checkpointed by SqliteSaver."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    def tick(state: State) -> dict[str, Any]:
        return {"done": state["done"] + 1, "out": f"tick {state['done'] + 1}"}

    def answer(state: State) -> dict[str, Any]:
        return {"out": ANSWER}

    def route(state: State) -> str:
        return "answer" if state["done"] >= STEPS else "tick"

    builder = StateGraph(State)
    builder.add_node("tick", tick)
    builder.add_node("answer", answer)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", route, ["tick", "answer"])
    builder.add_edge("answer", END)
    conn = sqlite3.connect(str(data_dir / "langgraph.sqlite"), check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))

    def run() -> str:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        state = graph.invoke({"done": 0, "out": ""}, config, durability="sync")  # type: ignore[arg-type]
        return str(state["out"])

    return run


RUNNERS = {"dbos": dbos_runner, "langgraph": langgraph_runner}


def main(argv: list[str]) -> int:
    peer, data_dir = argv[0], Path(argv[1])
    data_dir.mkdir(parents=True, exist_ok=True)
    run = RUNNERS[peer](data_dir)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        started = time.perf_counter()
        out = run()
        elapsed_s = time.perf_counter() - started
        if out != ANSWER:
            print(f"error wrong answer {out!r}", flush=True)
            return 1
        print(f"{elapsed_s:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
