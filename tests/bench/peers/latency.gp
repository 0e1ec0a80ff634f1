# latency.gp: var/bench/latency.png from the percentile curves summary.py writes
# (gnuplot -e "latdir='DIR'; out='FILE'" latency.gp). One panel per cell, KeyLoad and its
# peer side by side; x is the percentile on a "nines" scale so the tail is visible.
set terminal pngcairo size 1400,1000 font ",10"
set output out
load latdir."/titles.gp"
set multiplot layout 2,2 title "KeyLoad vs peers: latency by percentile (all three runs of each cell; same machine)"
set logscale y
set grid
set xlabel "percentile"
set ylabel "latency (us)"
set xrange [0:*]
set xtics ("0" 0, "50" 0.301, "90" 1, "99" 2, "99.9" 3, "99.99" 4)
set key top left
set title "1 in flight: KeyLoad RF3 sealed enqueue vs JetStream R3 sync publish"
plot latdir."/rf3_1.pct" using 1:2 with lines lw 2 title "KeyLoad RF3 (fsync every copy), ".n_rf3_1, \
     latdir."/js_1.pct" using 1:2 with lines lw 2 title "JetStream R3 (no fsync before ack), ".n_js_1
set title "64 in flight: KeyLoad RF3 sealed enqueue vs JetStream R3 publish"
plot latdir."/rf3_64.pct" using 1:2 with lines lw 2 title "KeyLoad RF3, ".n_rf3_64, \
     latdir."/js_64.pct" using 1:2 with lines lw 2 title "JetStream R3, ".n_js_64
set title "transfers, 1 in flight: KeyLoad client-driven vs PostgreSQL outbox, 1 client"
plot latdir."/xfer_1.pct" using 1:2 with lines lw 2 title "KeyLoad transfer (4 sealed calls, 3 partitions), ".n_xfer_1, \
     latdir."/pg_1.pct" using 1:2 with lines lw 2 title "PostgreSQL outbox (3 commits), ".n_pg_1
set title "transfers, many in flight: KeyLoad 32 vs PostgreSQL outbox 8 clients"
plot latdir."/xfer_32.pct" using 1:2 with lines lw 2 title "KeyLoad, 32 in flight, ".n_xfer_32, \
     latdir."/pg_8.pct" using 1:2 with lines lw 2 title "PostgreSQL outbox, 8 clients, ".n_pg_8
unset multiplot
