#!/usr/bin/python3
"""Runs sender/transport/testing/smtp_peer.py unchanged, but listening on CATCHER_BIND (default 0.0.0.0)
instead of the 127.0.0.1 it hard-codes for tests on one machine: in a container the sender
connects from another network namespace. All arguments are passed to smtp_peer.py."""
import os
import runpy
import sys

import aiosmtpd.controller as controller

BIND = os.environ.get("CATCHER_BIND", "0.0.0.0")
_init = controller.InetMixin.__init__


def _init_bind(self, *args, hostname=None, **kwargs):
    _init(self, *args, hostname=BIND, **kwargs)


controller.InetMixin.__init__ = _init_bind
peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smtp_peer.py")
sys.argv = [peer] + sys.argv[1:]
runpy.run_path(peer, run_name="__main__")
