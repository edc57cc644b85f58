#!/usr/bin/env bash
# Installs Debian's systemd-journal-remote, whose `systemd-journal-remote -o FILE.journal -`
# turns journal export format into a real journal file. The journald kernel log source's
# tests write their journal files with it (tests/unit/detector/test_journal.py); nothing is
# started or enabled. The runtime image does not need it (the source reads journals through
# libsystemd0, which the Debian base image already carries).
#
# Usage: tools/install-journal-remote.sh      (root, or sudo without a password)
# Skips work when the command is already there. Measured: docs/detector.md, "The journald source".
set -euo pipefail
find_tool() {
  command -v systemd-journal-remote 2>/dev/null || { [ -x /lib/systemd/systemd-journal-remote ] &&
    echo /lib/systemd/systemd-journal-remote; }
}
if tool=$(find_tool); then
  echo "install-journal-remote: already installed ($tool)"
  exit 0
fi
"$(dirname "$0")/apt-install.sh" install-journal-remote systemd-journal-remote
echo "install-journal-remote: $(find_tool)"
