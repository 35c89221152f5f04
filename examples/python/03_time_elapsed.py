# Seed snippet "MPS 演算のパフォーマンスを分析" (analysing an operation's performance):
# event.time_elapsed() is the device time of the recorded work, in microseconds.
import sys
import time

import eventide as ev

a = ev.rand(1024, 1024)
b = ev.rand(1024, 1024)
a.wait()
b.wait()

start = time.perf_counter()
# MPS 演算を実行
output = ev.matmul(a, b)

# イベントを作成
event = ev.Event()

# イベントを演算に関連付け
event.record(output)

# イベントが完了するまで待機
event.wait()
wall_us = (time.perf_counter() - start) * 1e6

# イベントの経過時間を取得 (the elapsed time, in microseconds)
time_elapsed = event.time_elapsed()

# 演算のパフォーマンスを出力 (print the operation's performance)
print(f"Time elapsed: {time_elapsed}")
print(f"  = {time_elapsed / 1000:.3f} ms for 2*1024^3 flops: "
      f"{2 * 1024 ** 3 / (time_elapsed * 1e-6) / 1e9:.1f} GFLOP/s (host saw {wall_us:.0f} us)")

if not isinstance(time_elapsed, float) or time_elapsed <= 0.0:
    sys.exit("time_elapsed must be a positive float")
if time_elapsed > wall_us * 1.05 + 1000:
    sys.exit("the device time cannot exceed the host's wall time around the op")
print("ok")
