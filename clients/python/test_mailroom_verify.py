"""mailroom_verify against the shared known-answer cases (../testdata/vectors.json, or the file
MAILROOM_VECTORS names), in-process and through its command line."""

import io
import json
import os
import subprocess
import sys
import unittest

import mailroom_verify as mv

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.environ.get("MAILROOM_VECTORS", os.path.join(HERE, "..", "testdata", "vectors.json"))
with open(VECTORS, encoding="utf-8") as f:
    DOC = json.load(f)
CASES = DOC["cases"]
SPEC_KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
SPEC_ACT = CASES[0]["token"]


def env_for(case):
    return {"MAILROOM_SECRET_KEY": case["keys"][0],
            "MAILROOM_VERIFY_KEYS": ",".join(case["keys"][1:])}


def argv_for(case):
    argv = ["--action=" + case["action"], "--token=" + case["token"]]
    if case["code"] is not None:
        argv.append("--code=" + case["code"])
    return argv


class VectorsTest(unittest.TestCase):
    def test_every_case(self):
        self.assertGreaterEqual(len(CASES), 50)
        for case in CASES:
            with self.subTest(case["name"]):
                keys = [bytes.fromhex(k) for k in case["keys"]]
                if case["valid"]:
                    secret = mv.verify_token(case["token"], case["action"], keys, case["code"])
                    self.assertEqual(secret.hex(), case["secret"])
                else:
                    with self.assertRaises(mv.InvalidToken) as e:
                        mv.verify_token(case["token"], case["action"], keys, case["code"])
                    self.assertEqual(e.exception.kind, case["refusal"])
                    self.assertNotIn(case["token"] or "\0", str(e.exception))

    def test_every_case_on_the_command_line(self):
        for case in CASES:
            with self.subTest(case["name"]):
                out, err = io.StringIO(), io.StringIO()
                rc = mv.main(argv_for(case), env_for(case), io.StringIO(), out, err)
                if case["valid"]:
                    self.assertEqual((rc, out.getvalue()), (0, "valid\n"), err.getvalue())
                else:
                    self.assertEqual(rc, 1, err.getvalue())
                    self.assertTrue(err.getvalue().startswith("invalid: "))
                if len(case["token"]) >= 8:
                    self.assertNotIn(case["token"], out.getvalue() + err.getvalue())


class WellFormedTest(unittest.TestCase):
    def test_every_case_spelling_with_no_key_and_no_code(self):
        counts = {True: 0, False: 0}
        for case in CASES:
            with self.subTest(case["name"]):
                self.assertIs(mv.well_formed(case["token"], case["action"]), case["well_formed"])
                counts[case["well_formed"]] += 1
        self.assertTrue(counts[True] and counts[False])

    def test_a_recovery_token_without_its_code_is_well_formed_but_does_not_verify(self):
        case = next(c for c in CASES if c["action"] == "password_recovery"
                    and c["code"] is None and c["well_formed"])
        with self.assertRaises(mv.InvalidToken) as e:
            mv.verify_token(case["token"], case["action"], [bytes.fromhex(case["keys"][0])])
        self.assertEqual(e.exception.kind, "malformed")
        self.assertTrue(mv.well_formed(case["token"], case["action"]))

    def test_a_name_that_is_not_an_actions_raises(self):
        for name in DOC["invalid_action_names"] + [None, 7]:
            with self.subTest(name=name):
                with self.assertRaises(ValueError):
                    mv.well_formed(SPEC_ACT, name)
        for token in (None, 86, b"x" * 86):
            self.assertFalse(mv.well_formed(token, "activation"))

    def test_every_case_on_the_command_line_both_forms(self):
        for case in CASES:
            for argv in (["--well-formed", "--action=" + case["action"], "--token=" + case["token"]],
                         ["--action", case["action"], "--well-formed", "--token", case["token"]]):
                with self.subTest(case["name"], argv=argv[:2]):
                    out, err = io.StringIO(), io.StringIO()
                    rc = mv.main(argv, {}, io.StringIO(), out, err)
                    if case["well_formed"]:
                        self.assertEqual((rc, out.getvalue()), (0, "well-formed\n"), err.getvalue())
                    else:
                        self.assertEqual(rc, 1, err.getvalue())
                        self.assertTrue(err.getvalue().startswith("malformed: "))
                    if len(case["token"]) >= 8:
                        self.assertNotIn(case["token"], out.getvalue() + err.getvalue())
        for name in DOC["invalid_action_names"]:
            self.assertEqual(mv.main(["--well-formed", "--action", name, "--token", SPEC_ACT], {},
                                     io.StringIO(), io.StringIO(), io.StringIO()), 2)

    def test_every_flag_as_the_next_word(self):
        for case in CASES:
            with self.subTest(case["name"]):
                argv = ["--action", case["action"], "--token", case["token"]]
                if case["code"] is not None:
                    argv += ["--code", case["code"]]
                err = io.StringIO()
                rc = mv.main(argv, env_for(case), io.StringIO(), io.StringIO(), err)
                self.assertEqual(rc, 0 if case["valid"] else 1, err.getvalue())
        for argv in (["--action=activation", "--token"], ["--action"],
                     ["--action=activation", "--token=x", "extra"], ["--well-formed=maybe"]):
            with self.subTest(argv=argv):
                err = io.StringIO()
                self.assertEqual(mv.main(argv, {"MAILROOM_SECRET_KEY": SPEC_KEY}, io.StringIO(),
                                         io.StringIO(), err), 2)
                self.assertNotIn("extra", err.getvalue())
        self.assertEqual(mv.main(["--help"], {}, io.StringIO(), io.StringIO(), io.StringIO()), 0)


class CommandLineTest(unittest.TestCase):
    def run_cli(self, argv, env, stdin=""):
        p = subprocess.run([sys.executable, os.path.join(HERE, "mailroom_verify.py"), *argv],
                           input=stdin, capture_output=True, text=True,
                           env={"PATH": os.environ.get("PATH", ""), **env})
        return p.returncode, p.stdout, p.stderr

    def test_a_real_process_for_each_outcome(self):
        key = {"MAILROOM_SECRET_KEY": SPEC_KEY}
        self.assertEqual(self.run_cli(["--action=activation", "--token=" + SPEC_ACT], key)[:2],
                         (0, "valid\n"))
        rc, _, err = self.run_cli(["--action=activation", "--token=" + SPEC_ACT[:-1] + "R"], key)
        self.assertEqual(rc, 1)
        self.assertNotIn(SPEC_ACT[:-1], err)
        self.assertEqual(self.run_cli(["--action=activation", "--token=-"], key,
                                      SPEC_ACT + "\r\n")[0], 0)
        login = next(c for c in CASES
                     if c["action"] == "login_code" and c["valid"] and len(c["keys"]) == 1)
        self.assertEqual(self.run_cli(["--action=login_code", "--token=-", "--code=" + login["code"]],
                                      env_for(login), login["token"] + "\n")[:2], (0, "valid\n"))

    def test_usage_and_configuration_errors_exit_2_naming_the_variable(self):
        key = {"MAILROOM_SECRET_KEY": SPEC_KEY}
        for argv, env, says in [
                (["--action=Email-Change", "--token=x"], key, "--action"),
                (["--action=activation"], key, "--token"),
                (["--action=activation", "--tokn=" + SPEC_ACT], key, "--tokn"),
                (["--action=activation", "--token=x"], {}, "MAILROOM_SECRET_KEY"),
                (["--action=activation", "--token=x"], {"MAILROOM_SECRET_KEY": "abc"},
                 "MAILROOM_SECRET_KEY"),
                (["--action=activation", "--token=x"],
                 {**key, "MAILROOM_VERIFY_KEYS": SPEC_KEY + ",xyz"}, "MAILROOM_VERIFY_KEYS key 2")]:
            with self.subTest(argv=argv, env=env):
                out, err = io.StringIO(), io.StringIO()
                self.assertEqual(mv.main(argv, env, io.StringIO(), out, err), 2)
                self.assertIn(says, err.getvalue())
                self.assertNotIn(SPEC_ACT, err.getvalue())
                self.assertNotIn(SPEC_KEY, err.getvalue())


class ApiTest(unittest.TestCase):
    def test_parse_keys_orders_current_first_and_skips_blanks(self):
        keys = mv.parse_keys(SPEC_KEY, " %s , ," % ("ab" * 32))
        self.assertEqual(keys, [bytes.fromhex(SPEC_KEY), bytes.fromhex("ab" * 32)])
        with self.assertRaises(mv.KeyConfigError):
            mv.parse_keys("0g" * 32)
        with self.assertRaises(mv.KeyConfigError):
            mv.parse_keys(" " + SPEC_KEY[1:])  # bytes.fromhex would skip the space

    def test_a_name_that_is_not_an_actions_is_not_an_invalid_token(self):
        self.assertGreaterEqual(len(DOC["invalid_action_names"]), 10)
        for name in DOC["invalid_action_names"] + [None, 7]:
            with self.subTest(name=name):
                with self.assertRaises(ValueError) as e:
                    mv.verify_token(SPEC_ACT, name, [bytes.fromhex(SPEC_KEY)])
                self.assertNotIsInstance(e.exception, mv.InvalidToken)
                if isinstance(name, str):
                    err = io.StringIO()
                    argv = ["--action=" + name, "--token=" + SPEC_ACT]
                    self.assertEqual(mv.main(argv, {"MAILROOM_SECRET_KEY": SPEC_KEY},
                                             io.StringIO(), io.StringIO(), err), 2)
                    self.assertIn("--action", err.getvalue())

    def test_every_action_has_its_domain(self):
        self.assertEqual(mv.action_domain("activation"), b"/activate")
        self.assertEqual(mv.action_domain("password_recovery"), b"/recover")
        self.assertEqual(mv.action_domain("login_code"), b"/action/login_code/")
        self.assertEqual(mv.action_domain("welcome_gift"), b"/action/welcome_gift/")

    def test_the_vectors_cover_every_action_by_name(self):
        actions = {c["action"] for c in CASES}
        for name in ("activation", "password_recovery", "login_code", "email_change",
                     "invitation", "welcome_gift", "team_invite"):
            self.assertIn(name, actions)


if __name__ == "__main__":
    unittest.main()
