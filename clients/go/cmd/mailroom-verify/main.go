// Command mailroom-verify checks a mailroom token (and, for password recovery, its code)
// against MAILROOM_SECRET_KEY and MAILROOM_VERIFY_KEYS; see mailroomverify.Main.
package main

import (
	"os"

	mailroomverify "github.com/mailroom-dev/mailroom/clients/go"
)

func main() {
	os.Exit(mailroomverify.Main(os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}
