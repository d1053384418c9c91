"""Drives an oblivkv server with redis-py, as an application would.

Usage: python3 redis_py.py HOST PORT. Prints "ok" when every check holds;
any failed check raises (a non-zero exit and a traceback).
"""
import sys
import threading

import redis


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    for protocol in (2, 3):  # redis-py 6 and later ask for RESP3 by default
        pool = redis.ConnectionPool(host=host, port=port, max_connections=8, protocol=protocol)
        r = redis.Redis(connection_pool=pool)
        assert r.ping()
        r.delete("py:a", "py:f", "py:s", "py:n", "py:piped", "py:pooled")
        strings(r)
        pipelined(r)
        pooled(r)
        refused(r)
        pool.disconnect()
    print("ok")


def strings(r):
    assert r.set("py:a", "1") is True
    assert r.incr("py:a") == 2
    assert r.incrby("py:a", 10) == 12
    assert r.decr("py:a") == 11
    assert r.decrby("py:a", 20) == -9
    assert r.incrbyfloat("py:f", 1.5) == 1.5
    assert r.append("py:s", "ab") == 2
    assert r.append("py:s", "cd") == 4
    assert r.get("py:s") == b"abcd"
    assert r.strlen("py:s") == 4
    assert r.type("py:s") == b"string"
    assert r.type("py:none") == b"none"
    assert r.setnx("py:s", "x") is False
    assert r.set("py:n", "v", nx=True) is True
    assert r.set("py:n", "w", nx=True) is None
    assert r.set("py:n", "w", xx=True) is True
    assert r.set("py:n", "v", get=True) == b"w"
    assert r.getset("py:n", "z") == b"v"
    assert r.getdel("py:n") == b"z"
    assert r.get("py:n") is None
    assert r.exists("py:a", "py:s", "py:none") == 2
    assert r.msetnx({"py:m1": "1", "py:m2": "2"}) is True
    assert r.msetnx({"py:m3": "3", "py:m1": "9"}) is False
    assert r.mget(["py:m1", "py:m2", "py:m3"]) == [b"1", b"2", None]
    assert r.delete("py:m1", "py:m2", "py:m3") == 2
    try:
        r.incr("py:s")
    except redis.ResponseError as e:
        assert "not an integer" in str(e), e
    else:
        raise AssertionError("INCR of a non-integer succeeded")


def pipelined(r):
    p = r.pipeline(transaction=False)
    for _ in range(100):
        p.incr("py:piped")
    p.get("py:piped")
    assert p.execute() == list(range(1, 101)) + [b"100"]


def pooled(r):
    def work():
        for _ in range(50):
            r.incr("py:pooled")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.get("py:pooled") == b"400", r.get("py:pooled")


def refused(r):
    for command in (("KEYS", "*"), ("EXPIRE", "py:a", "10"), ("TTL", "py:a")):
        try:
            r.execute_command(*command)
        except redis.ResponseError as e:
            assert "not supported by oblivkv" in str(e), e
        else:
            raise AssertionError(f"{command[0]} was not refused")


if __name__ == "__main__":
    main()
