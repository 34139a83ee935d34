"""service/formats/syslog.py: the syslog shapes rsyslog and others write, field by field."""

from __future__ import annotations

import pytest

from service.errors import InvalidMessage, Reason
from service.formats.syslog import SyslogFormat, parse_line


def test_rsyslog_file_format_omkafkas_default():
    # Byte for byte what omkafka wrote with its default template (RSYSLOG_FileFormat) for
    # `logger -t web --id=4242 -p local3.warning` (tests/integration/test_shippers.py runs the real one).
    [fields] = SyslogFormat().split(b"2026-12-01T10:37:35.768577+00:00 vm web[4242]: line 00\n")
    assert fields == {
        "timestamp": "2026-12-01T10:37:35.768577+00:00",
        "host": "vm",
        "app": "web",
        "pid": 4242,
        "message": "line 00",
    }


def test_rsyslog_forward_format_has_the_priority():
    fields = parse_line("<156>2026-12-01T10:00:00.123456+00:00 web-1 sshd[17]: Accepted publickey for ops")
    assert fields["facility"] == "local3"
    assert fields["severity"] == "warning"
    assert fields["priority"] == 156
    assert fields["app"] == "sshd"
    assert fields["message"] == "Accepted publickey for ops"


def test_rfc3164_traditional_formats():
    fields = parse_line("<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8")
    assert fields == {
        "timestamp": "Oct 11 22:14:15",
        "host": "mymachine",
        "app": "su",
        "priority": 34,
        "facility": "auth",
        "severity": "crit",
        "message": "'su root' failed for lonvick on /dev/pts/8",
    }
    assert (
        parse_line("Dec  1 09:05:01 web-1 CRON[812]: (root) CMD (run-parts)")["timestamp"]
        == "Dec  1 09:05:01"
    )


def test_rfc5424_with_structured_data_and_a_bom():
    # RFC 5424 section 6.5, example 3, with the BOM the RFC allows before UTF-8 text.
    line = (
        '<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3"'
        ' eventSource="Application" eventID="1011"][examplePriority@32473 class="high"]'
        " \ufeffAn application event"
    )
    fields = parse_line(line)
    assert fields["app"] == "evntslog"
    assert "pid" not in fields  # the nil value "-"
    assert fields["msgid"] == "ID47"
    assert fields["structured_data"] == {
        "exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"},
        "examplePriority@32473": {"class": "high"},
    }
    assert fields["severity"] == "notice"
    assert fields["facility"] == "local4"
    assert fields["message"] == "An application event"


def test_rfc5424_escapes_in_structured_data_values():
    fields = parse_line(r'<13>1 - host app 1 - [x@1 q="say \"hi\" \] \\ done"] text')
    assert fields["structured_data"] == {"x@1": {"q": 'say "hi" ] \\ done'}}
    assert fields["message"] == "text"
    assert "timestamp" not in fields


def test_rfc5424_without_structured_data_or_message():
    assert parse_line("<14>1 2026-12-01T10:00:00Z web-1 app 99 - -")["message"] == ""


def test_a_tag_needs_its_colon():
    # "GET" is not a tag: the text after the host is all message.
    fields = parse_line("Dec  1 10:00:00 web-1 GET /health: 200")
    assert "app" not in fields
    assert fields["message"] == "GET /health: 200"


@pytest.mark.parametrize("line", ["just a line of text", "", "<999>out of range", "12 monkeys"])
def test_a_line_without_a_header_is_all_message(line):
    fields = parse_line(line)
    assert set(fields) == {"message"}
    assert fields["message"] in line


def test_invalid_utf8_is_its_reason():
    with pytest.raises(InvalidMessage) as info:
        SyslogFormat().split(b"Dec  1 10:00:00 web-1 app: caf\xc3\x28")
    assert info.value.reason is Reason.INVALID_UTF8


def test_one_message_is_one_item():
    assert not SyslogFormat.fans_out
    assert SyslogFormat.text_field == "message"


def test_a_pid_of_other_digits_stays_text():
    # "²".isdigit() is true, int("²") fails: the line must still parse.
    assert parse_line("Dec  1 10:00:00 web-1 app[²]: odd pid")["pid"] == "²"
    assert parse_line("<13>1 - web-1 app ² - - odd")["pid"] == "²"
