#!/usr/bin/env python3
"""rdma-core's rdma_cm tests (pyverbs, tests/test_rdmacm.py), with each side in a uroce process of
its own.

Unmodified, the suite runs the passive and the active side as two processes forked from one, on one
device and one address, which uroce cannot serve yet (a device address belongs to the one process
whose engine binds it; see docs/verbs.md, "rdma-core's test suite"). This driver runs the same test
methods, the same connection classes (tests/rdmacm_utils.py) and the same traffic flows
(tests/base.py), changing only where each side runs:

- RDMACMBaseTest.setUp runs the suite's own discovery (RDMATestCase.setUp: the device's IP address
  through /sys/class/infiniband/uroce0/device/net/, `ls` of it in a subprocess and `ip addr show`
  of the netdev, which liburoce's answers make work without root) and requires it to find the
  netdev; then it takes the server's address instead of the netdev's first one (on lo that is
  127.0.0.1, not the 127.0.x.y of the device);
- RDMACMBaseTest.two_nodes_rdmacm_traffic starts the two sides as fresh processes (multiprocessing
  "spawn", not "fork"), each with its own UROCE_DEVICES (uroce0 on the server or the client
  address), and judges their exit codes as the original does, except that a side killed by a
  signal fails the test. The multicast flows cannot be split so and are skipped (see there).

Both sides are handed the server's address, as in the original: the passive side binds it, the
active side resolves it (its source, also that address, is a loopback address its own device does
not have, which rdma_cm binds like the wildcard, as the kernel's CM does). This process itself
uses a third address, so that a context it opens (the multicast tests ask whether the device
supports multicast) does not take either side's.

    pyverbs_rdmacm.py SUITE_DIR SERVER_IP CLIENT_IP OWN_IP [unittest options, e.g. -v]

SUITE_DIR is the directory holding rdma-core's ungzipped tests/ package. Run under uroce-run.
"""
import enum
import multiprocessing as mp
import os
import sys
import unittest

# Exit codes of a side, as tests/base.py defines them: 0 pass, 2 an exception, 5 a skip.
SIDE_SKIP = 5


def _import_suite(suite_dir):
    # tests/base.py imports `args_parser` as a top-level module, the tests as package `tests`.
    for p in (suite_dir, os.path.join(suite_dir, 'tests')):
        if p not in sys.path:
            sys.path.insert(0, p)


def _side(suite_dir, flow, conn_class, passive, ip, syncer, notifier, kwargs):
    """One side of a test, in its own process: the flow method of RDMACMBaseTest, unbound, on an
    object holding the few attributes it reads."""
    _import_suite(suite_dir)
    from tests.base import RDMACMBaseTest
    import tests.rdmacm_utils as ru

    class Side:
        _rdmacm_exception_handler = staticmethod(RDMACMBaseTest._rdmacm_exception_handler)

    s = Side()
    s.ip_addr, s.syncer, s.notifier = ip, syncer, notifier
    getattr(RDMACMBaseTest, flow)(s, connection_resources=getattr(ru, conn_class),
                                  passive=passive, **kwargs)


def main():
    suite_dir, server_ip, client_ip, own_ip = sys.argv[1:5]
    unittest_args = sys.argv[5:]
    os.environ['UROCE_DEVICES'] = 'uroce0=' + own_ip
    _import_suite(suite_dir)
    from args_parser import parser
    sys.argv = [sys.argv[0], '--dev', 'uroce0', '--gid', '0']
    parser.parse_args()
    from tests.base import RDMACMBaseTest, RDMATestCase, NUM_OF_PROCESSES
    import tests.test_rdmacm as test_rdmacm

    def set_up(self):
        self.dev_name, self.ib_port, self.gid_index = 'uroce0', 1, 0
        RDMATestCase.setUp(self)
        if not self.ip_addr:
            raise Exception('the suite found no net interface of uroce0 in /sys/class/infiniband')
        self.ip_addr = server_ip

    def two_nodes_rdmacm_traffic(self, connection_resources, test_flow, bad_flow=False,
                                 **resource_kwargs):
        if test_flow.__name__ == 'rdmacm_multicast_traffic':
            # Both players bind and join with the one address of the original's shared device, and
            # derive the group from it: a player whose own device does not have that address gets
            # an id without a device (as from the kernel's CM), on which pyverbs' bind_addr makes a
            # Context from a NULL ibv_context and crashes. Given their own addresses instead, the
            # two would join different groups.
            raise unittest.SkipTest('multicast flows need one address shared by both sides')
        # pyverbs' enums (IntEnum, defined in a Cython module) do not pickle; their values do, and
        # compare and hash equal to them.
        resource_kwargs = {k: int(v) if isinstance(v, enum.IntEnum) else v
                           for k, v in resource_kwargs.items()}
        ctx = mp.get_context('spawn')
        self.syncer = ctx.Barrier(NUM_OF_PROCESSES, timeout=15)
        self.notifier = ctx.Queue()
        procs = {}
        for side, passive, ip in (('passive', True, server_ip), ('active', False, client_ip)):
            # A spawned process starts from this process's environment as it is at start().
            os.environ['UROCE_DEVICES'] = 'uroce0=' + ip
            procs[side] = ctx.Process(target=_side, args=(
                suite_dir, test_flow.__name__, connection_resources.__name__, passive,
                server_ip, self.syncer, self.notifier, resource_kwargs))
            procs[side].start()
        os.environ['UROCE_DEVICES'] = 'uroce0=' + own_ip
        # From here on as tests/base.py: 15 s for a good flow; a bad flow must still be stuck
        # after 0.6 s.
        repeat_times = 150 if not bad_flow else 3
        proc_res = {}
        for _ in range(repeat_times):
            for side, proc in procs.items():
                proc.join(0.1)
                if not proc.is_alive() and side not in proc_res:
                    proc_res[side] = proc.exitcode
        proc_killed = False
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()
                proc.join()
                proc_killed = True
        # Stricter than tests/base.py: a side that died of a signal (a crash) is a failure, also in a
        # bad flow, where the original would take it for the traffic that must not pass.
        crashed = {side: code for side, code in proc_res.items() if code < 0}
        if crashed:
            raise Exception(f'a side died of a signal: {crashed}')
        for side, code in proc_res.items():
            if code == SIDE_SKIP:
                raise unittest.SkipTest(f'SkipTest occurred on {side} side')
        if any(0 < code < SIDE_SKIP for code in proc_res.values()):
            raise Exception(f'Exception in active/passive side occurred: {proc_res}')
        if bad_flow and not proc_killed:
            raise Exception('Bad flow: traffic passed which is not expected')
        if not bad_flow and proc_killed:
            raise Exception('RDMA CM test procces is stuck, kill the test')

    RDMACMBaseTest.setUp = set_up
    RDMACMBaseTest.two_nodes_rdmacm_traffic = two_nodes_rdmacm_traffic
    unittest.main(module=test_rdmacm, argv=[sys.argv[0]] + unittest_args)


if __name__ == '__main__':
    main()
