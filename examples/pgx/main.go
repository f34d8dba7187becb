// Command signup: mailroom from Go with pgx v4: signup, resend, what happened, consume.
//
// Every call is schema-qualified (mailroom.request, not request) and every value is a
// parameter bound by the driver ($1, $2, ...), never part of the statement's text. Each query
// runs in autocommit: mailroom.consume's outcome (a wrong code too) is committed whatever
// comes next.
//
// Environment:
//
//	DATABASE_URL    the application's role (SELECT mailroom.grant_application('app'))
//	EXAMPLE_EMAIL   the address to sign up (default ada@example.test)
//	EXAMPLE_OUTBOX  the sender's MAILROOM_FILE_DIR (file transport): stands in for the user's
//	                mailbox; the newest activation email to the address is the one "clicked"
package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v4"
)

type email struct {
	token  *int64
	action string
	state  string
	reason *string
}

// waitSent returns the account's emails once tokenID (or, when 0, any activation) is sent.
func waitSent(ctx context.Context, db *pgx.Conn, account, tokenID int64) []email {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, err := db.Query(ctx, "SELECT token_id, action, state, reason FROM mailroom.account_emails"+
			" WHERE account = $1 ORDER BY requested_at DESC, token_id DESC", account)
		if err != nil {
			log.Fatal(err)
		}
		var out []email
		sent := false
		for rows.Next() {
			var e email
			if err := rows.Scan(&e.token, &e.action, &e.state, &e.reason); err != nil {
				log.Fatal(err)
			}
			if e.state == "sent" && (tokenID == 0 || (e.token != nil && *e.token == tokenID)) {
				sent = true
			}
			out = append(out, e)
		}
		if err := rows.Err(); err != nil {
			log.Fatal(err)
		}
		if sent {
			return out
		}
		if time.Now().After(deadline) {
			log.Fatalf("no email sent in 30 s: %+v", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var activateLink = regexp.MustCompile(`/activate\?token=([A-Za-z0-9_-]+)`)

// plainText is the text/plain part of a multipart email, decoded.
func plainText(msg *mail.Message) string {
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		b, _ := io.ReadAll(msg.Body)
		return string(b)
	}
	var parts []*multipart.Reader
	parts = append(parts, multipart.NewReader(msg.Body, params["boundary"]))
	for len(parts) > 0 {
		r := parts[len(parts)-1]
		p, err := r.NextPart()
		if err != nil {
			parts = parts[:len(parts)-1]
			continue
		}
		ct, pp, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		switch {
		case strings.HasPrefix(ct, "multipart/"):
			parts = append(parts, multipart.NewReader(p, pp["boundary"]))
		case ct == "text/plain":
			// A multipart.Part undoes quoted-printable itself; mailroom's sender writes base64.
			var body io.Reader = p
			if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
				body = base64.NewDecoder(base64.StdEncoding, p)
			}
			b, _ := io.ReadAll(body)
			return string(b)
		}
	}
	return ""
}

// newestActivationToken is the token of the newest activation email to address (the click).
func newestActivationToken(outbox, address string) string {
	files, _ := filepath.Glob(filepath.Join(outbox, "*.eml"))
	sort.Sort(sort.Reverse(sort.StringSlice(files)))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		msg, err := mail.ReadMessage(fh)
		if err == nil {
			to, _ := mail.ParseAddress(msg.Header.Get("To"))
			if to != nil && to.Address == address {
				if m := activateLink.FindStringSubmatch(plainText(msg)); m != nil {
					fh.Close()
					return m[1]
				}
			}
		}
		fh.Close()
	}
	log.Fatalf("no activation email to %s in %s", address, outbox)
	return ""
}

func main() {
	ctx := context.Background()
	address := os.Getenv("EXAMPLE_EMAIL")
	if address == "" {
		address = "ada@example.test"
	}
	db, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close(ctx)

	// 1. Sign up: the trigger queues the activation email.
	var account int64
	if err := db.QueryRow(ctx, "INSERT INTO mailroom.accounts (email, login, locale)"+
		" VALUES ($1, $2, $3) RETURNING id", address, "ada", "en").Scan(&account); err != nil {
		log.Fatal(err)
	}
	fmt.Println("signed up: account", account)
	waitSent(ctx, db, account, 0)

	// 2. "Didn't get the email?": send it again.
	var decision string
	var tokenID *int64
	var retryAt *time.Time
	var reason *string
	if err := db.QueryRow(ctx, "SELECT decision, token_id, retry_at, reason FROM mailroom.request($1, $2)",
		account, "activation").Scan(&decision, &tokenID, &retryAt, &reason); err != nil {
		log.Fatal(err)
	}
	fmt.Println("resend:", decision, deref(tokenID))
	if decision != "queued" || tokenID == nil {
		log.Fatalf("resend not queued: %s %v", decision, reason)
	}

	// 3. What happened to each email of the account.
	for _, e := range waitSent(ctx, db, account, *tokenID) {
		fmt.Println("email:", deref(e.token), e.action, e.state)
	}

	// 4. The user clicks the newest email's button: consume its token.
	token := newestActivationToken(os.Getenv("EXAMPLE_OUTBOX"), address)
	const consume = "SELECT outcome, account, action FROM mailroom.consume($1, $2)"
	var outcome, again, action string
	var acct *int64
	if err := db.QueryRow(ctx, consume, token, nil).Scan(&outcome, &acct, &action); err != nil {
		log.Fatal(err)
	}
	fmt.Println("consume:", outcome, deref(acct), action)
	if err := db.QueryRow(ctx, consume, token, nil).Scan(&again, &acct, &action); err != nil {
		log.Fatal(err)
	}
	fmt.Println("consume again:", again)
	var status string
	if err := db.QueryRow(ctx, "SELECT status::text FROM mailroom.accounts WHERE id = $1",
		account).Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("account status:", status)
	if outcome != "ok" || again != "consumed" || status != "active" {
		log.Fatalf("unexpected: %s, %s, %s", outcome, again, status)
	}
}

func deref(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
