#!/bin/bash
# Redis instructions per decision under callgrind: a redis-server with the
# module SO (or, as cell-instructions.sh, redis-cell) on PORT, CALLS
# pipelined calls of R requests over KEYS keys sent twice by
# scripts/server-time; only the second counted (keys and records exist).
# usage: cell-instructions.sh LABEL PORT CALLS 1 KEYS
so=$1; port=$2; calls=$3; r=$4; keys=$5
rm -f cg.out.*
valgrind --tool=callgrind --callgrind-out-file=cg.out.%p --instr-atstart=no redis-server --port $port --save '' --appendonly no --loadmodule ../../../target/redis-cell/build/release/libredis_cell.so >/dev/null 2>vg.err &
vpid=$!
for i in $(seq 1 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.3; done
callgrind_control -i on $vpid >/dev/null
../../../scripts/server-time $port "99 100 1" 1 $calls $keys --cell >/dev/null 2>&1
callgrind_control -z $vpid >/dev/null
../../../scripts/server-time $port "99 100 1" 1 $calls $keys --cell >/dev/null 2>&1
callgrind_control -i off $vpid >/dev/null
callgrind_control -d $vpid >/dev/null
redis-cli -p $port shutdown nosave >/dev/null 2>&1
wait $vpid
total=$(grep -h '^totals:' cg.out.*.1 | awk '{s+=$2} END {print s}')
echo "$so R=$r: $total instr, $(( total / (calls * r) )) per decision"
