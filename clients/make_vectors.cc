// make_vectors: prints clients/testdata/vectors.json, the known-answer cases every token
// verifier (the C++ `verify`, clients/js, clients/python, clients/go) must agree on. Tokens come
// from the collector's own signer; keys and secrets are fixed, so the output never changes
// unless the cases do (a test compares it with the committed file).
//
//   bazel run //clients:make_vectors > clients/testdata/vectors.json
//
// Each case: action, keys (hex, tried in order), token, code (null: none given), and either
// valid + the secret (hex), or the refusal: "malformed" (not the signer's spelling of 64 bytes,
// a recovery code that is not 5 ASCII digits, or another action's code that is not 5 to 12
// ASCII digits) or "mismatch" (well formed, no key signed it). invalid_action_names: names every
// verifier refuses as an action (an error of the caller, not a refusal of the token).
// Every case also says whether its token is well_formed: the spelling check every verifier has
// (WellFormed, wellFormed, well_formed, --well-formed), which needs no key and no code, so a
// recovery token without its code is well formed though it does not verify.
//
// Actions other than activation and password_recovery are signed by SignNamed below: by the
// collector's signer when it takes their names (and then checked against the contract, D(name)
// = "/action/" || name || "/", the code appended when given, computed here), by the contract
// alone otherwise. Either way the output is the same.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "collector/dispatch/signing.h"
#include "nlohmann/json.hpp"

namespace mailroom {
namespace {

using Json = nlohmann::ordered_json;

// Fixed, readable-in-code bytes: HMAC-SHA256("mailroom test vectors", label).
std::string Derive(absl::string_view label) { return HmacSha256("mailroom test vectors", label); }

const std::string kSpecKey = absl::HexStringToBytes(
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
const std::string kCurrentKey = Derive("current key");
const std::string kOldKey = Derive("old key");
const std::string kWrongKey(32, '\xff');

SigningKey Key(const std::string& bytes) {
  SigningKey key;
  std::copy(bytes.begin(), bytes.end(), key.bytes.begin());
  return key;
}

std::string Sign(const std::string& key, const TokenAction& action, const std::string& secret,
                 const std::string& code) {
  auto token = SignToken(Key(key), action, secret, code);
  if (!token.ok()) {
    std::cerr << "make_vectors: " << token.status() << "\n";
    std::exit(1);
  }
  return *token;
}

std::string Encode(absl::string_view raw) {
  std::string out;
  absl::WebSafeBase64Escape(raw, &out);
  return out;
}

std::string Decode(absl::string_view token) {
  std::string raw;
  absl::WebSafeBase64Unescape(token, &raw);
  return raw;
}

const char* ActionName(const TokenAction& action) {
  return action == TokenAction::kActivation ? "activation" : "password_recovery";
}

// The token of an action other than activation and password_recovery: the collector's signer's
// once it takes the action's name, checked against the signing contract (secret ||
// HMAC-SHA256(key, "/action/" || name || "/" || secret || code), the code appended when the
// action carries one) computed here; the contract's alone until then.
std::string SignNamed(const std::string& key, const std::string& name, const std::string& secret,
                      const std::string& code) {
  if (secret.size() != 32) {
    std::cerr << "make_vectors: a secret must be 32 bytes\n";
    std::exit(1);
  }
  std::string contract = Encode(secret +
                                HmacSha256(key, absl::StrCat("/action/", name, "/", secret, code)));
  auto action = ParseTokenAction(name);
  if (!action.ok()) return contract;
  std::string signed_token = Sign(key, *action, secret, code);
  if (signed_token != contract) {
    std::cerr << "make_vectors: the signer's token for " << name << " is not the contract's\n";
    std::exit(1);
  }
  return signed_token;
}

class Cases {
 public:
  void Valid(const std::string& name, const TokenAction& action,
             const std::vector<std::string>& keys, const std::string& token,
             const std::optional<std::string>& code, const std::string& secret) {
    Valid(name, ActionName(action), keys, token, code, secret);
  }
  void Refused(const std::string& name, const char* refusal, const TokenAction& action,
               const std::vector<std::string>& keys, const std::string& token,
               const std::optional<std::string>& code) {
    Refused(name, refusal, ActionName(action), keys, token, code);
  }
  void Valid(const std::string& name, const std::string& action,
             const std::vector<std::string>& keys, const std::string& token,
             const std::optional<std::string>& code, const std::string& secret) {
    Json c = Case(name, action, keys, token, code);
    c["valid"] = true;
    c["secret"] = absl::BytesToHexString(secret);
    Check(c, name);
    cases_.push_back(std::move(c));
  }
  void Refused(const std::string& name, const char* refusal, const std::string& action,
               const std::vector<std::string>& keys, const std::string& token,
               const std::optional<std::string>& code) {
    Json c = Case(name, action, keys, token, code);
    c["valid"] = false;
    c["refusal"] = refusal;
    Check(c, name);
    cases_.push_back(std::move(c));
  }
  const Json& json() const { return cases_; }

 private:
  static Json Case(const std::string& name, const std::string& action,
                   const std::vector<std::string>& keys, const std::string& token,
                   const std::optional<std::string>& code) {
    Json c;
    c["name"] = name;
    c["action"] = action;
    c["keys"] = Json::array();
    for (const std::string& k : keys) c["keys"].push_back(absl::BytesToHexString(k));
    c["token"] = token;
    c["code"] = code ? Json(*code) : Json(nullptr);
    // The spelling check: the signer's one spelling, whatever the key, code or signature.
    c["well_formed"] = WellFormed(token).ok();
    return c;
  }
  // A token that verifies, or is refused for its signature, is spelt right; a refusal of a
  // token that is not is "malformed". Anything else is a mistake in the cases.
  static void Check(const Json& c, const std::string& name) {
    const bool well_formed = c["well_formed"];
    const bool spelling_refusal = !c["valid"] && c["refusal"] == "malformed";
    if (!well_formed && !spelling_refusal) {
      std::cerr << "make_vectors: case \"" << name << "\" is not well formed but "
                << (c["valid"] ? "valid" : "refused as mismatch") << "\n";
      std::exit(1);
    }
  }
  Json cases_ = Json::array();
};

// Every action by its name: the built-in ones beyond activation and recovery, two of the
// application's own, and tokens presented as another action than the one they were signed for.
void NamedActionCases(Cases& v) {
  const std::string s1 = Derive("named 1"), s2 = Derive("named 2"), s3 = Derive("named 3");
  const std::string login6 = SignNamed(kCurrentKey, "login_code", s1, "048213");
  const std::string login8 = SignNamed(kOldKey, "login_code", s2, "73920516");
  const std::string change = SignNamed(kCurrentKey, "email_change", s3, "");
  const std::string invite = SignNamed(kSpecKey, "invitation", s1, "");
  const std::string gift = SignNamed(kCurrentKey, "welcome_gift", s2, "902144");
  const std::string team = SignNamed(kCurrentKey, "team_invite", s3, "");
  const std::string longest(63, 'z');
  v.Valid("login_code, 6-digit code", "login_code", {kCurrentKey}, login6, "048213", s1);
  v.Valid("login_code, 8-digit code, old key after rotation", "login_code", {kCurrentKey, kOldKey},
          login8, "73920516", s2);
  v.Valid("login_code, 12-digit code", "login_code", {kCurrentKey},
          SignNamed(kCurrentKey, "login_code", s3, "000000000000"), "000000000000", s3);
  v.Valid("email_change (no code)", "email_change", {kCurrentKey}, change, std::nullopt, s3);
  v.Valid("invitation (no code), SPEC.md key", "invitation", {kSpecKey}, invite, std::nullopt, s1);
  v.Valid("custom action welcome_gift with a code", "welcome_gift", {kCurrentKey}, gift, "902144",
          s2);
  v.Valid("custom action team_invite without a code", "team_invite", {kCurrentKey}, team,
          std::nullopt, s3);
  v.Valid("custom action with a 63-character name", longest, {kCurrentKey},
          SignNamed(kCurrentKey, longest, s1, ""), std::nullopt, s1);

  // The code is the action's: a wrong one, none, or one where the action signs none.
  v.Refused("login_code: wrong code (last digit)", "mismatch", "login_code", {kCurrentKey}, login6,
            "048214");
  v.Refused("login_code: the 6-digit code's first 5 digits", "mismatch", "login_code",
            {kCurrentKey}, login6, "04821");
  v.Refused("login_code: code not given", "mismatch", "login_code", {kCurrentKey}, login6,
            std::nullopt);
  v.Refused("login_code: the 8-digit code's first 6 digits", "mismatch", "login_code",
            {kCurrentKey, kOldKey}, login8, "739205");
  v.Refused("email_change with a code given (it signs none)", "mismatch", "email_change",
            {kCurrentKey}, change, "123456");
  v.Refused("welcome_gift: code not given", "mismatch", "welcome_gift", {kCurrentKey}, gift,
            std::nullopt);
  for (const auto& [what, code] : std::vector<std::pair<std::string, std::string>>{
           {"4 digits", "0482"},
           {"13 digits", "0482130000000"},
           {"a letter", "04821a"},
           {"a space", "048 213"},
           {"a sign", "+48213"},
           {"full-width digits",
            "\xef\xbc\x90\xef\xbc\x94\xef\xbc\x98\xef\xbc\x92\xef\xbc\x91\xef\xbc\x93"}}) {
    v.Refused(absl::StrCat("login_code: code of ", what), "malformed", "login_code", {kCurrentKey},
              login6, code);
  }

  // A token signed for one action, presented as another.
  v.Refused("a login_code token as email_change", "mismatch", "email_change", {kCurrentKey}, login6,
            std::nullopt);
  v.Refused("a login_code token as welcome_gift, same code", "mismatch", "welcome_gift",
            {kCurrentKey}, login6, "048213");
  v.Refused("a welcome_gift token as login_code, same code", "mismatch", "login_code",
            {kCurrentKey}, gift, "902144");
  v.Refused("an email_change token as invitation", "mismatch", "invitation", {kCurrentKey}, change,
            std::nullopt);
  v.Refused("an email_change token as team_invite", "mismatch", "team_invite", {kCurrentKey},
            change, std::nullopt);
  v.Refused("an invitation token as activation", "mismatch", TokenAction::kActivation, {kSpecKey},
            invite, std::nullopt);
  v.Refused("a team_invite token as invitation", "mismatch", "invitation", {kCurrentKey}, team,
            std::nullopt);
  const std::string activation = Sign(kCurrentKey, TokenAction::kActivation, s1, "");
  v.Refused("an activation token as a custom action named activate", "mismatch", "activate",
            {kCurrentKey}, activation, std::nullopt);
  v.Refused("an activation token as a custom action named activation_", "mismatch", "activation_",
            {kCurrentKey}, activation, std::nullopt);
  const std::string recovery = Sign(kCurrentKey, TokenAction::kPasswordRecovery, s2, "73920");
  v.Refused("a password_recovery token as login_code, same code", "mismatch", "login_code",
            {kCurrentKey}, recovery, "73920");
  v.Refused("a login_code token as password_recovery, first 5 digits", "mismatch",
            TokenAction::kPasswordRecovery, {kOldKey}, login8, "73920");
  v.Refused("domain confusion: MAC over \"/action/login_code\" || secret || code, no '/'",
            "mismatch", "login_code", {kCurrentKey},
            Encode(s1 + HmacSha256(kCurrentKey, absl::StrCat("/action/login_code", s1, "048213"))),
            "048213");
  v.Refused("a team_invite token as an action named team", "mismatch", "team", {kCurrentKey}, team,
            std::nullopt);
  v.Refused("login_code: wrong key", "mismatch", "login_code", {kWrongKey}, login6, "048213");
  std::string flipped = Decode(login6);
  flipped[40] ^= 0x10;
  v.Refused("login_code: bit 4 of byte 40 flipped (MAC)", "mismatch", "login_code", {kCurrentKey},
            Encode(flipped), "048213");
}

Json MakeVectors() {
  const TokenAction kAct = TokenAction::kActivation;
  const TokenAction kRec = TokenAction::kPasswordRecovery;
  Cases v;

  // SPEC.md's known answers, produced by mailroom's original C collector.
  const std::string spec_act_secret = absl::HexStringToBytes(
      "3ca243c69e1dc0d1f0311379120dcb80a277b64a1d3588cf15e9507a02e21ed4");
  const std::string spec_rec_secret = absl::HexStringToBytes(
      "2ea219cf963bc55678b15b247d93e59d5600c71a66126bd951bdd86ebf229e25");
  const std::string spec_act = Sign(kSpecKey, kAct, spec_act_secret, "");
  const std::string spec_rec = Sign(kSpecKey, kRec, spec_rec_secret, "42565");
  v.Valid("SPEC.md activation vector (its code is not signed)", kAct, {kSpecKey}, spec_act, "94896",
          spec_act_secret);
  v.Valid("SPEC.md password_recovery vector", kRec, {kSpecKey}, spec_rec, "42565", spec_rec_secret);

  // Every action under every key.
  const struct {
    const char* name;
    const std::string& key;
  } keys[] = {{"current", kCurrentKey}, {"old", kOldKey}, {"SPEC.md", kSpecKey}};
  const char* codes[] = {"00000", "99999", "01234"};
  int n = 0;
  for (const auto& k : keys) {
    const std::string secret = Derive(absl::StrCat("secret ", n));
    const std::string code = codes[n++];
    v.Valid(absl::StrCat("activation, ", k.name, " key"), kAct, {k.key},
            Sign(k.key, kAct, secret, ""), std::nullopt, secret);
    v.Valid(absl::StrCat("password_recovery, ", k.name, " key, code ", code), kRec, {k.key},
            Sign(k.key, kRec, secret, code), code, secret);
  }
  const std::string zeros(32, '\0'), ones(32, '\xff');
  v.Valid("activation of an all-zero secret", kAct, {kCurrentKey},
          Sign(kCurrentKey, kAct, zeros, ""), std::nullopt, zeros);
  v.Valid("password_recovery of an all-ones secret", kRec, {kCurrentKey},
          Sign(kCurrentKey, kRec, ones, "00000"), "00000", ones);

  // A token that spells both of base64url's own characters, '-' and '_'.
  std::string url_secret, url_token;
  for (int i = 0;
       url_token.find('-') == std::string::npos || url_token.find('_') == std::string::npos; ++i) {
    url_secret = Derive(absl::StrCat("alphabet ", i));
    url_token = Sign(kCurrentKey, kRec, url_secret, "31415");
  }
  v.Valid("password_recovery whose token has '-' and '_'", kRec, {kCurrentKey}, url_token, "31415",
          url_secret);

  // Key rotation: sign with the first key, accept any key in the list, in any position.
  const std::string rot_secret = Derive("rotation");
  const std::string by_old = Sign(kOldKey, kRec, rot_secret, "27182");
  const std::string by_current = Sign(kCurrentKey, kRec, rot_secret, "27182");
  v.Valid("rotation: signed with the old key, keys current + old", kRec, {kCurrentKey, kOldKey},
          by_old, "27182", rot_secret);
  v.Valid("rotation: signed with the old key, keys old + current", kRec, {kOldKey, kCurrentKey},
          by_old, "27182", rot_secret);
  v.Valid("rotation: signed with the current key, keys current + old", kRec, {kCurrentKey, kOldKey},
          by_current, "27182", rot_secret);
  v.Valid("rotation: signed with the old key, third of three keys", kAct,
          {kWrongKey, kCurrentKey, kOldKey}, Sign(kOldKey, kAct, rot_secret, ""), std::nullopt,
          rot_secret);
  v.Valid("rotation: a key listed twice", kAct, {kCurrentKey, kCurrentKey},
          Sign(kCurrentKey, kAct, rot_secret, ""), std::nullopt, rot_secret);
  v.Refused("rotation: signed with an old key no longer listed", "mismatch", kRec, {kCurrentKey},
            by_old, "27182");

  // Activation does not sign a code: whatever is given is ignored.
  v.Valid("activation with a code given (ignored)", kAct, {kSpecKey}, spec_act, "12345",
          spec_act_secret);
  v.Valid("activation with a malformed code given (ignored)", kAct, {kSpecKey}, spec_act, "x",
          spec_act_secret);

  // Wrong key, action, code.
  v.Refused("wrong key", "mismatch", kRec, {kWrongKey}, spec_rec, "42565");
  v.Refused("wrong keys, two of them", "mismatch", kAct, {kWrongKey, kCurrentKey}, spec_act,
            std::nullopt);
  v.Refused("wrong action: an activation token as password_recovery", "mismatch", kRec, {kSpecKey},
            spec_act, "94896");
  v.Refused("wrong action: a password_recovery token as activation", "mismatch", kAct, {kSpecKey},
            spec_rec, "42565");
  for (const char* code : {"42566", "42564", "24565", "00000"}) {
    v.Refused(absl::StrCat("wrong code ", code), "mismatch", kRec, {kSpecKey}, spec_rec, code);
  }
  v.Refused("domain confusion: MAC over \"/recover\" || secret, without the code", "mismatch", kRec,
            {kSpecKey},
            Encode(spec_rec_secret +
                   HmacSha256(kSpecKey, absl::StrCat("/recover", spec_rec_secret))),
            "42565");
  v.Refused("spliced: one token's secret, another's MAC", "mismatch", kRec, {kSpecKey},
            Encode(spec_act_secret + Decode(spec_rec).substr(32)), "42565");
  v.Refused("garbage: 86 'A' (64 zero bytes)", "mismatch", kAct, {kSpecKey}, std::string(86, 'A'),
            std::nullopt);
  v.Refused("garbage: canonical base64url of 64 other bytes", "mismatch", kAct, {kSpecKey},
            Encode(Derive("garbage 1") + Derive("garbage 2")), std::nullopt);

  // A single flipped bit anywhere in the 64 bytes, re-encoded canonically.
  for (const auto& [which, action, token, code] :
       {std::tuple{"activation", kAct, spec_act, std::optional<std::string>()},
        std::tuple{"password_recovery", kRec, spec_rec, std::optional<std::string>("42565")}}) {
    const std::string raw = Decode(token);
    for (auto [byte, bit] :
         {std::pair{0, 0}, {0, 7}, {15, 3}, {31, 7}, {32, 0}, {47, 4}, {63, 1}, {63, 0}}) {
      std::string flipped = raw;
      flipped[byte] ^= static_cast<char>(1 << bit);
      v.Refused(absl::StrCat(which, ": bit ", bit, " of byte ", byte, " flipped (",
                             byte < 32 ? "secret" : "MAC", ")"),
                "mismatch", action, {kSpecKey}, Encode(flipped), code);
    }
  }

  // The last character carries 2 data bits and 4 unused ones that the signer leaves zero.
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  for (int bit = 0; bit < 6; ++bit) {
    std::string t = spec_rec;
    t.back() = alphabet[alphabet.find(t.back()) ^ (1 << bit)];
    v.Refused(absl::StrCat("last character: bit ", bit, " of its 6 flipped (",
                           bit < 4 ? "unused bit" : "data bit", ")"),
              bit < 4 ? "malformed" : "mismatch", kRec, {kSpecKey}, t, "42565");
  }
  for (int low = 1; low < 16; ++low) {
    std::string t = spec_act;
    t.back() = alphabet[alphabet.find(t.back()) | low];
    v.Refused(absl::StrCat("same 64 bytes, last character's unused bits = ", low), "malformed",
              kAct, {kSpecKey}, t, std::nullopt);
  }
  // A bit flipped in one character as text.
  for (auto [pos, mask] : {std::pair{10, 0x20}, {0, 0x40}}) {
    std::string t = spec_act;
    t[pos] ^= static_cast<char>(mask);
    const bool still_base64url = alphabet.find(t[pos]) != std::string::npos;
    v.Refused(absl::StrCat("character ", pos, " with its ASCII bit 0x", absl::Hex(mask),
                           " flipped"),
              still_base64url ? "mismatch" : "malformed", kAct, {kSpecKey}, t, std::nullopt);
  }
  {
    std::string t = url_token;
    t[t.find('-')] ^= 0x01;  // '-' -> ','
    v.Refused("'-' with its ASCII bit 0x01 flipped (',')", "malformed", kRec, {kCurrentKey}, t,
              "31415");
  }

  // Other spellings of the same bytes.
  v.Refused("padded with '='", "malformed", kAct, {kSpecKey}, spec_act + "=", std::nullopt);
  v.Refused("padded with '=='", "malformed", kAct, {kSpecKey}, spec_act + "==", std::nullopt);
  v.Refused("86 characters ending in '=='", "malformed", kAct, {kSpecKey},
            spec_act.substr(0, 84) + "==", std::nullopt);
  v.Refused("standard alphabet ('+' and '/' for '-' and '_')", "malformed", kRec, {kCurrentKey},
            absl::StrReplaceAll(url_token, {{"-", "+"}, {"_", "/"}}), "31415");
  for (const auto& [from, to] : {std::pair{'-', '+'}, {'_', '/'}}) {
    std::string t = url_token;
    t[t.find(from)] = to;
    v.Refused(absl::StrCat("one '", std::string(1, from), "' spelt '", std::string(1, to), "'"),
              "malformed", kRec, {kCurrentKey}, t, "31415");
  }
  v.Refused("percent-encoded '-' (%2D)", "malformed", kRec, {kCurrentKey},
            absl::StrReplaceAll(url_token, {{"-", "%2D"}}), "31415");
  std::string spaced = spec_act;
  spaced[40] = ' ';
  for (const auto& [what, token] : std::vector<std::pair<std::string, std::string>>{
           {"a space in place of character 40", spaced},
           {"a space inserted", spec_act.substr(0, 40) + " " + spec_act.substr(40)},
           {"a tab inserted", spec_act.substr(0, 40) + "\t" + spec_act.substr(40)},
           {"wrapped by a line break", spec_act.substr(0, 76) + "\r\n" + spec_act.substr(76)},
           {"a leading space", " " + spec_act},
           {"a trailing space", spec_act + " "},
           {"a trailing newline", spec_act + "\n"},
           {"a trailing CRLF", spec_act + "\r\n"}}) {
    v.Refused(absl::StrCat("whitespace: ", what), "malformed", kAct, {kSpecKey}, token,
              std::nullopt);
  }

  // Wrong lengths.
  for (const auto& [what, token] : std::vector<std::pair<std::string, std::string>>{
           {"empty", ""},
           {"1 character", "A"},
           {"43 characters (half)", spec_act.substr(0, 43)},
           {"84 characters (63 bytes, canonical)", Encode(Decode(spec_act).substr(0, 63))},
           {"85 characters (last dropped)", spec_act.substr(0, 85)},
           {"85 characters (first dropped)", spec_act.substr(1)},
           {"87 characters ('A' appended)", spec_act + "A"},
           {"88 characters (66 bytes, canonical)", Encode(Decode(spec_act) + "\x01\x02")},
           {"172 characters (the token twice)", spec_act + spec_act}}) {
    v.Refused(absl::StrCat("length: ", what), "malformed", kAct, {kSpecKey}, token, std::nullopt);
  }

  // Garbage.
  v.Refused("garbage: words", "malformed", kAct, {kSpecKey}, "not a token", std::nullopt);
  v.Refused("garbage: 86 '*'", "malformed", kAct, {kSpecKey}, std::string(86, '*'), std::nullopt);
  v.Refused("garbage: 86 '='", "malformed", kAct, {kSpecKey}, std::string(86, '='), std::nullopt);
  v.Refused("garbage: a non-ASCII letter in place of the last two characters", "malformed", kAct,
            {kSpecKey}, spec_act.substr(0, 84) + "\xc3\xa9", std::nullopt);

  // Recovery codes that are not 5 ASCII digits (the token is fine).
  for (const auto& [what, code] : std::vector<std::pair<std::string, std::optional<std::string>>>{
           {"none given", std::nullopt},
           {"empty", ""},
           {"4 digits", "4256"},
           {"6 digits", "425650"},
           {"a letter", "4256a"},
           {"a leading space", " 4256"},
           {"full-width digits", "\xef\xbc\x94\xef\xbc\x92\xef\xbc\x95\xef\xbc\x96\xef\xbc\x95"},
           {"Arabic-Indic digits", "\xd9\xa4\xd9\xa2\xd9\xa5\xd9\xa6\xd9\xa5"}}) {
    v.Refused(absl::StrCat("recovery code: ", what), "malformed", kRec, {kSpecKey}, spec_rec, code);
  }

  // What a front end checks on a recovery link's GET, before the user has typed the code: the
  // token verifies only with its code, but it is well formed without one.
  v.Refused("password_recovery token without its code (well formed)", "malformed", kRec,
            {kCurrentKey}, url_token, std::nullopt);

  NamedActionCases(v);

  Json doc;
  doc["description"] =
      "mailroom token known-answer cases, generated by //clients:make_vectors from the "
      "collector's signer; every verifier must agree with every case. Do not edit by hand.";
  doc["token_format"] =
      "base64url_without_padding(secret[32] || HMAC-SHA256(key, msg)); msg = \"/activate\" || "
      "secret for activation, \"/recover\" || secret || code (5 ASCII digits) for "
      "password_recovery, \"/action/\" || name || \"/\" || secret || code for any other "
      "action named [a-z][a-z0-9_]{0,62}, the code (5 to 12 ASCII digits) appended only when "
      "one is given";
  doc["case_fields"] =
      "keys: hex, tried in order; code: null when none is given; valid cases give the secret "
      "(hex); refused ones the refusal: malformed (not the signer's spelling of 64 bytes, a "
      "recovery code that is not 5 ASCII digits, another action's code that is not 5 to 12 "
      "ASCII digits) or mismatch (well formed, no key signed it); well_formed: whether the "
      "token alone has the signer's one spelling (86 base64url characters, no padding, the "
      "last character's 4 unused bits zero), the spelling check that needs no key and no code";
  doc["invalid_action_names"] = Json::array();
  for (const char* name : {"", "Login_code", "login-code", "9lives", "_welcome", "login code",
                           "login_code/", "../activate", "/activate", "caf\xc3\xa9"}) {
    doc["invalid_action_names"].push_back(name);
  }
  doc["invalid_action_names"].push_back(std::string(64, 'a'));  // one over the 63 allowed
  doc["cases"] = v.json();
  return doc;
}

}  // namespace
}  // namespace mailroom

int main() {
  std::cout << mailroom::MakeVectors().dump(2, ' ', /*ensure_ascii=*/true) << "\n";
  return 0;
}
