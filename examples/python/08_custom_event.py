# Seed section "カスタムイベント" (custom events): a class with set() and wait(), driven by a
# completion callback. Unlike the seed's version, wait() blocks without busy-waiting (on a
# threading.Condition), and the object can be given to ev.wait_all with real events.
import sys
import threading

import eventide as ev


class MyEvent:
    def __init__(self):
        self._completed = False
        self._cond = threading.Condition()

    def set(self):
        with self._cond:
            self._completed = True
            self._cond.notify_all()

    def wait(self, timeout=None):
        with self._cond:
            # 他の処理を行う: other threads run meanwhile; this one sleeps until set()
            return self._cond.wait_for(lambda: self._completed, timeout)


a = ev.rand(512, 512)
b = ev.rand(512, 512)

# MPS 演算を実行
output = ev.matmul(a, b)

# イベントを作成
event = MyEvent()

# イベントを演算に関連付け
def on_complete():
    event.set()

output.add_completion_callback(on_complete)

# イベントが完了するまで待機
event.wait()

# 処理を進める
print(output)
if not output.ready:
    sys.exit("MyEvent was set before the output was ready")

# Custom events mix with eventide events in ev.wait_all.
output2 = ev.matmul(b, a)
mine = MyEvent()
output2.add_completion_callback(mine.set)
real = ev.Event()
real.record(output2 + output)
if not ev.wait_all([real, mine], timeout=60):
    sys.exit("wait_all timed out")
print(output2)
if not (real.completed and output2.ready):
    sys.exit("wait_all returned early")
print("ok")
