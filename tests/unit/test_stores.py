"""What a server pays, seen from outside: Temporal's counters parsed from Prometheus text, and a
process tree's disk writes and CPU followed pid by pid."""

import os
import subprocess
import sys

from metrics.stores import ProcessTree, file_bytes, is_read_operation, parse_temporal_metrics

PAGE = """\
# HELP persistence_requests persistence_requests counter
# TYPE persistence_requests counter
persistence_requests{namespace="default",operation="UpdateWorkflowExecution",service_name="history"} 208
persistence_requests{namespace="system",operation="UpdateWorkflowExecution",service_name="history"} 2
persistence_requests{namespace="default",operation="GetWorkflowExecution",service_name="history"} 13
persistence_requests{namespace="default",operation="CreateTasks",service_name="matching"} 4
persistence_requests{namespace="system",operation="AssertShardOwnership",service_name="history"} 1
persistence_requests_total_ignored{operation="X"} 99
persistence_latency_bucket{operation="UpdateWorkflowExecution",le="0.001"} 17
action{action_type="command_StartTimer",namespace="default"} 37
action{action_type="grpc_SignalWithStartWorkflowExecution",namespace="default"} 25
command{commandType="StartTimer",namespace="default"} 37
command{commandType="ScheduleActivityTask",namespace="default"} 9
workflow_success{namespace="default",workflowType="BatchPoller"} 8
activity_success{activityType="poll_batch",namespace="default"} 8
service_requests{namespace="default",operation="SignalWithStartWorkflowExecution",service_name="frontend"} 25
service_requests{namespace="default",operation="RecordWorkflowTaskStarted",service_name="history"} 69
"""


def test_temporal_counters_are_summed_over_labels_and_split_by_the_named_one():
    m = parse_temporal_metrics(PAGE)
    assert m["persistence_requests.UpdateWorkflowExecution"] == 210  # both namespaces
    assert m["persistence_requests.GetWorkflowExecution"] == 13
    assert m["persistence_requests"] == 210 + 13 + 4 + 1  # not the _total_ignored family, not buckets
    assert m["persistence_writes"] == 210 + 4
    assert m["persistence_reads"] == 13 + 1
    assert m["actions"] == 62
    assert m["commands.StartTimer"] == 37 and m["commands.ScheduleActivityTask"] == 9
    assert m["workflow_success"] == 8 and m["activity_success"] == 8
    assert m["frontend_requests.SignalWithStartWorkflowExecution"] == 25
    assert not any("RecordWorkflowTaskStarted" in k for k in m)  # history-service requests are not the client's


def test_read_operations_are_told_from_writes_by_name():
    for op in ("GetWorkflowExecution", "ReadHistoryBranch", "ListNamespaces", "AssertShardOwnership", "GetTasks"):
        assert is_read_operation(op), op
    for op in (
        "UpdateWorkflowExecution",
        "CreateWorkflowExecution",
        "AppendHistoryNodes",
        "RangeCompleteTimerTasks",
        "CompleteTasksLessThan",
        "UpsertClusterMembership",
        "DeleteWorkflowExecution",
    ):
        assert not is_read_operation(op), op


CHILD = """
import os, sys, time
path = sys.argv[1]
with open(path, "wb") as f:
    for _ in range(8):
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
print("written", flush=True)
sys.stdin.readline()  # stay alive until told, so the tree sees the writes
"""


def test_process_tree_counts_the_bytes_its_processes_write(tmp_path):
    # a parent whose child writes 8 MiB with fsync: the tree of the parent sees them
    target = tmp_path / "blob"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
                "stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True); print(p.stdout.readline().strip(), "
                "flush=True); sys.stdin.readline(); p.communicate('\\n')"
            ),
            CHILD,
            str(target),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    tree = ProcessTree(lambda: [parent.pid])
    try:
        tree.sample()  # baseline: the child may already have started writing; new pids count fully
        assert parent.stdout.readline().strip() == "written"
        values = tree.sample()
    finally:
        parent.communicate("\n", timeout=30)
    assert tree.error is None
    written = os.path.getsize(target)
    assert written == 8 << 20
    # the kernel charges a process for what it sent towards storage: at least the file's bytes
    assert values["write_bytes"] >= written, values
    assert values["cpu_s"] > 0
    # by kind of process (here both are python): the kinds add up to the total
    kinds = {k: v for k, v in values.items() if k.startswith("write_bytes.")}
    assert kinds and sum(kinds.values()) == values["write_bytes"]


def test_file_bytes_sums_the_files_that_exist(tmp_path):
    (tmp_path / "a.db").write_bytes(b"x" * 100)
    (tmp_path / "a.db-wal").write_bytes(b"y" * 23)
    assert file_bytes((tmp_path / "a.db", tmp_path / "a.db-wal", tmp_path / "a.db-shm")) == 123.0
