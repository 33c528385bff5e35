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


def _launched_dbos(
    data_dir: Path, name: str, workflow: Callable[..., Any], *args: Any
) -> Callable[[], str]:
    """Launch DBOS on its default SQLite system database in ``data_dir``; a run starts
    ``workflow(*args)`` on a fresh workflow id."""
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": name,
        "system_database_url": f"sqlite:///{data_dir / 'dbos.sqlite'}",
    }
    DBOS(config=config)
    DBOS.launch()

    def run() -> str:
        with SetWorkflowID(str(uuid.uuid4())):
            return str(workflow(*args))

    return run


def dbos_runner(data_dir: Path) -> Callable[[], str]:
    """One DBOS workflow of ten steps per call, on a SQLite system database in ``data_dir``."""
    from dbos import DBOS

    @DBOS.step()
    def tick(n: int) -> str:
        return f"tick {n}"

    @DBOS.workflow()
    def steps10() -> str:
        for n in range(1, STEPS + 1):
            tick(n)
        return ANSWER

    return _launched_dbos(data_dir, "tether-bench-durable", steps10)


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


def _scripted_decision(tool_results: int) -> tuple[str, int]:
    """The agent shapes' scripted model, as Tether's ``steps10`` agent answers: ask for ``tick``
    until ten results are in, then answer. ``("tick", n)`` or ``("answer", 0)``."""
    return ("answer", 0) if tool_results >= STEPS else ("tick", tool_results + 1)


def dbos_agent_runner(data_dir: Path) -> Callable[[], str]:
    """The agent shape on DBOS, as its durable-agent docs write one: every model call and every
    tool call a ``@DBOS.step()`` of one workflow (21 steps for ten tool steps and the answer),
    each step's output committed before the workflow goes on."""
    from dbos import DBOS

    @DBOS.step()
    def call_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        done = sum(m["role"] == "tool" for m in messages)
        action, n = _scripted_decision(done)
        if action == "answer":
            return {"role": "assistant", "content": ANSWER}
        return {"role": "assistant", "tool_call": {"name": "tick", "args": {"n": n}}}

    @DBOS.step()
    def call_tool(name: str, args: dict[str, Any]) -> str:
        return f"tick {args['n']}"

    @DBOS.workflow()
    def agent(question: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        while True:
            reply = call_model(messages)
            messages.append(reply)
            if "tool_call" not in reply:
                return str(reply["content"])
            call = reply["tool_call"]
            messages.append({"role": "tool", "content": call_tool(call["name"], call["args"])})

    return _launched_dbos(data_dir, "tether-bench-durable-agent", agent, "ten steps, please")


def langgraph_agent_runner(data_dir: Path) -> Callable[[], str]:
    """The agent shape on LangGraph, as its docs build a tool-calling agent: an ``agent`` node
    (the scripted model answers an ``AIMessage`` with a tool call) and a prebuilt ``ToolNode``,
    routed by ``tools_condition``, on ``MessagesState``; checkpointed by SqliteSaver with
    ``durability="sync"`` after every node (21 super-steps for ten tool steps and the answer)."""
    import sqlite3

    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def tick(n: int) -> str:
        """One step of work."""
        return f"tick {n}"

    def agent(state: MessagesState) -> dict[str, Any]:
        done = sum(isinstance(m, ToolMessage) for m in state["messages"])
        action, n = _scripted_decision(done)
        if action == "answer":
            return {"messages": [AIMessage(content=ANSWER)]}
        call = {"name": "tick", "args": {"n": n}, "id": f"call_{n}", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([tick]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    conn = sqlite3.connect(str(data_dir / "langgraph-agent.sqlite"), check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))

    def run() -> str:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        state = graph.invoke(
            {"messages": [("user", "ten steps, please")]},
            config,  # type: ignore[arg-type]
            durability="sync",
        )
        return str(state["messages"][-1].content)

    return run


RUNNERS = {
    "dbos": dbos_runner,
    "langgraph": langgraph_runner,
    "dbos-agent": dbos_agent_runner,
    "langgraph-agent": langgraph_agent_runner,
}


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
