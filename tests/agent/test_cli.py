"""``gpugraph agent``'s flags: values no agent could run with are refused at the prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.cli import main


@pytest.mark.parametrize("interval", ["inf", "nan", "0", "1e-9", "3601", "soon"])
@pytest.mark.parametrize("command", ["agent", "demo"])
def test_a_scan_interval_no_agent_could_keep_is_refused(
    command: str, interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # inf killed the sampler thread (a time_t overflow) while the agent went on serving;
    # 1e-9 made it a busy loop on NVML.
    with pytest.raises(SystemExit) as exited:
        main([command, "--interval", interval])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--interval" in err
    assert "must be 0.1 to 3600 seconds" in err or "expected seconds" in err


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_proc_root_that_is_no_directory_stops_the_agent_at_start(
    where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A /host/proc mount missing from the DaemonSet resolved no PID, without a word. Checked
    # at start, not by the parser: the chart's arguments are parsed where no /host/proc is.
    (tmp_path / "a-file").write_text("")
    assert main(["agent", "--node-name", "n", "--proc-root", str(tmp_path / where)]) == 2
    assert f"--proc-root {tmp_path / where} is not a directory" in caplog.text
