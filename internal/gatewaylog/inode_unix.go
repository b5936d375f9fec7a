//go:build unix

package gatewaylog

import (
	"os"
	"syscall"
)

// inode is the file's inode number, which tells a replaced file apart.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
