// Command signup: mailroom from Go with pgx v4: the account emails of docs/integration.md in
// its order. A signup, a resend, what happened, the activation's click; a password recovery (its
// link, a wrong code, then the right one); a sign-in code typed on another device
// (mailroom.consume_code); an address change confirmed from the new address. Each link is
// checked with the verifier of clients/go (package mailroomverify) before its token reaches
// mailroom.consume, as a front end's GET does; every answer is checked against the guide's.
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
//	                mailbox; the newest email of an action to an address is the one "clicked"
//	MAILROOM_SECRET_KEY, MAILROOM_VERIFY_KEYS
//	                the collector's signing key (and older ones): the verifier's keys
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
	mailroomverify "github.com/mailroom-dev/mailroom/clients/go"
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

var (
	typedCode = regexp.MustCompile(`(^|[^0-9])([0-9]{5,12})([^0-9]|$)`)
	anyLink   = regexp.MustCompile(`https?://\S+`)
)

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

// newestLink is the token and code of the newest email to address whose link goes to path
// (the user's click): the link's code, else the one the text shows for typing (or "").
func newestLink(outbox, address, path string) (token, code string) {
	link := regexp.MustCompile(regexp.QuoteMeta(path) + `\?token=([A-Za-z0-9_-]+)(?:&code=([0-9]+))?`)
	files, _ := filepath.Glob(filepath.Join(outbox, "*.eml"))
	sort.Sort(sort.Reverse(sort.StringSlice(files)))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		msg, err := mail.ReadMessage(fh)
		text := ""
		if err == nil {
			if to, _ := mail.ParseAddress(msg.Header.Get("To")); to != nil && to.Address == address {
				text = plainText(msg)
			}
		}
		fh.Close()
		if m := link.FindStringSubmatch(text); m != nil {
			code = m[2]
			if t := typedCode.FindStringSubmatch(anyLink.ReplaceAllString(text, " ")); code == "" && t != nil {
				code = t[2]
			}
			return m[1], code
		}
	}
	log.Fatalf("no email to %s with a link to %s in %s", address, path, outbox)
	return "", ""
}

// expect prints "what: got" and stops unless it is the answer the guide gives.
func expect(what string, got, want interface{}) {
	fmt.Printf("%s: %v\n", what, got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		log.Fatalf("%s: %v, not %v", what, got, want)
	}
}

// ask calls mailroom.request and waits until the new token's email is sent (as the user does).
func ask(ctx context.Context, db *pgx.Conn, account int64, action string, address *string) {
	var decision string
	var tokenID *int64
	var reason *string
	if err := db.QueryRow(ctx, "SELECT decision, token_id, reason FROM mailroom.request($1, $2, $3)",
		account, action, address).Scan(&decision, &tokenID, &reason); err != nil {
		log.Fatal(err)
	}
	expect("request "+action, []string{decision, deref(reason)}, []string{"queued", "-"})
	waitSent(ctx, db, account, *tokenID)
}

// answer is a row of mailroom.consume or mailroom.consume_code: outcome, account, action.
func answer(ctx context.Context, db *pgx.Conn, sql string, args ...interface{}) []string {
	var outcome string
	var acct *int64
	var action *string
	if err := db.QueryRow(ctx, sql, args...).Scan(&outcome, &acct, &action); err != nil {
		log.Fatal(err)
	}
	return []string{outcome, deref(acct), deref(action)}
}

const consume = "SELECT outcome, account, action FROM mailroom.consume($1, $2)"

// accountColumn is one column of the account's row in mailroom.accounts.
func accountColumn(ctx context.Context, db *pgx.Conn, column string, account int64) string {
	var v string
	if err := db.QueryRow(ctx, "SELECT "+column+"::text FROM mailroom.accounts WHERE id = $1",
		account).Scan(&v); err != nil {
		log.Fatal(err)
	}
	return v
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

	// 4. The user clicks the newest email's button: its GET verifies the token, the POST
	// consumes it.
	outbox := os.Getenv("EXAMPLE_OUTBOX")
	keys, err := mailroomverify.ParseKeys(os.Getenv("MAILROOM_SECRET_KEY"), os.Getenv("MAILROOM_VERIFY_KEYS"))
	if err != nil {
		log.Fatal(err)
	}
	verify := func(token, action, code string) {
		if _, err := mailroomverify.Verify(token, action, keys, code); err != nil {
			log.Fatalf("the %s link does not verify: %v", action, err)
		}
	}
	me := fmt.Sprint(account)
	token, _ := newestLink(outbox, address, "/activate")
	verify(token, "activation", "")
	expect("consume", answer(ctx, db, consume, token, nil), []string{"ok", me, "activation"})
	expect("consume again", answer(ctx, db, consume, token, nil)[0], "consumed")
	expect("account status", accountColumn(ctx, db, "status", account), "active")

	// 5. Password recovery: the GET checks the spelling only (the code is not typed yet); the
	// POST hands the typed code to mailroom.consume, a wrong one too (it is counted).
	ask(ctx, db, account, "password_recovery", nil)
	token, code := newestLink(outbox, address, "/recover")
	expect("recovery link well formed", mailroomverify.WellFormed(token, "password_recovery"), true)
	var n int
	fmt.Sscan(code, &n)
	wrong := fmt.Sprintf("%05d", (n+1)%100000)
	if _, err := mailroomverify.Verify(token, "password_recovery", keys, wrong); err == nil {
		log.Fatal("a wrong code verified") // and still the database counts it
	}
	expect("recovery with a wrong code", answer(ctx, db, consume, token, wrong)[0], "wrong_code")
	verify(token, "password_recovery", code)
	expect("recovery", answer(ctx, db, consume, token, code), []string{"ok", me, "password_recovery"})

	// 6. A sign-in code read on a phone, typed on the laptop: the account and the code.
	ask(ctx, db, account, "login_code", nil)
	token, code = newestLink(outbox, address, "/action/login_code")
	verify(token, "login_code", code)
	const signIn = "SELECT outcome, account, action FROM mailroom.consume_code($1, $2, $3)"
	expect("sign-in code", answer(ctx, db, signIn, account, "login_code", code), []string{"ok", me, "login_code"})
	expect("sign-in code again", answer(ctx, db, signIn, account, "login_code", code)[0], "consumed")

	// 7. An address change: the confirmation goes to the new address.
	newAddress := "new." + address
	ask(ctx, db, account, "email_change", &newAddress)
	token, _ = newestLink(outbox, newAddress, "/action/email_change")
	verify(token, "email_change", "")
	expect("email change", answer(ctx, db, consume, token, nil), []string{"ok", me, "email_change"})
	expect("account email", accountColumn(ctx, db, "email", account), newAddress)
	fmt.Println("every answer as the guide says")
}

// deref is what a nullable column holds, "-" for NULL.
func deref[T any](p *T) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
