# flip_byte.sh, sourced by the test scripts that damage a file on purpose (a token, a backup
# chunk) to see it refused.
#
#   flip_byte FILE OFFSET   inverts every bit of the byte at OFFSET, so the file always
#                           changes; writing a fixed byte instead leaves the file as it was
#                           whenever that byte was already there (1 run in 256 for a random
#                           byte), and the "damaged" input is then accepted. Fails when
#                           FILE has no byte at OFFSET.
flip_byte() {
  local b
  b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
  [ -n "$b" ] || return 1
  printf "$(printf '\\%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
